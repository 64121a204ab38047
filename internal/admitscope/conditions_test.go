package admitscope

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

func TestConditionsSendEveryPod(t *testing.T) {
	cases := map[string]struct {
		alternatives []v1alpha1.ImageAlternative
		mirrors      []v1alpha1.ImageMirror
		reason       Reason
		message      string
		unexpressed  int
	}{
		"a mirror without excludeImages covers every image": {
			alternatives: []v1alpha1.ImageAlternative{testutil.NewImageAlternative("a").Repository("quay.io/acme/app").Repository("ghcr.io/acme/app").Build()},
			mirrors: []v1alpha1.ImageMirror{
				testutil.NewImageMirror("narrow", "mirror.local/n/").Exclude("**").Build(),
				testutil.NewImageMirror("wide", "mirror.local/w/").Build(),
			},
			reason:  ReasonCatchAllMirror,
			message: `ImageMirror "wide" covers every image`,
		},
		"a dry-run mirror counts: the webhook records what it would do": {
			mirrors: []v1alpha1.ImageMirror{testutil.NewImageMirror("trial", "mirror.local/").DryRun().Build()},
			reason:  ReasonCatchAllMirror,
			message: `ImageMirror "trial" covers every image`,
		},
		"excludeImages that name tags are not expressed": {
			mirrors:     []v1alpha1.ImageMirror{testutil.NewImageMirror("m", "mirror.local/").Exclude("**:debug", "docker.io/**@sha256:*").Build()},
			reason:      ReasonCatchAllMirror,
			message:     `ImageMirror "m" covers every image (its excludeImages name tags or digests, which the condition does not express)`,
			unexpressed: 2,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Conditions(tc.alternatives, tc.mirrors)
			want := Result{Reason: tc.reason, Message: tc.message, UnexpressedExcludes: tc.unexpressed}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Conditions (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConditionsFilter(t *testing.T) {
	alts := []v1alpha1.ImageAlternative{
		testutil.NewImageAlternative("a").Repository("nginx").Repository("Quay.IO/acme/nginx").Build(),
		testutil.NewImageAlternative("b").Repository("docker.io/library/nginx").Repository("ghcr.io/acme/app").Build(),
		testutil.NewImageAlternative("g").Group("quay.io/acme/").Group("docker.io").Build(),
		testutil.NewImageAlternative("invalid").Repository("quay.io/acme/app:v1").Repository("quay.io/other/app").Build(),
	}
	mirrors := []v1alpha1.ImageMirror{
		testutil.NewImageMirror("m", "mirror.local/m/").Exclude("docker.io/**", "quay.io/*/foo*", "**:debug").Build(),
		testutil.NewImageMirror("off", "mirror.local/off/").Policy(v1alpha1.RewritePolicyNone).Build(),
	}
	got := Conditions(alts, mirrors)
	if got.Reason != ReasonFiltered || len(got.Conditions) != 1 || got.Conditions[0].Name != ConditionName {
		t.Fatalf("Conditions = %+v, want one condition %s, reason %s", got, ConditionName, ReasonFiltered)
	}
	expr := got.Conditions[0].Expression
	for _, want := range []string{
		// Entries in canonical form, each once; the invalid resource is left out.
		"[{'docker.io/library/nginx': true, 'ghcr.io/acme/app': true, 'quay.io/acme/nginx': true}].exists(repos, ",
		"[{'docker.io/library': true, 'quay.io/acme': true}].exists(groups, ",
		"!(m == 'mirror.local/m' || m.startsWith('mirror.local/m/') || m.matches('^(docker[.]io(/[^/]+)+|quay[.]io/[^/]+/foo[^/]*)$'))",
		fmt.Sprintf("size(cs) > %d", got.MaxContainers),
		"key.startsWith('kuik.enix.io/')",
	} {
		if !strings.Contains(expr, want) {
			t.Errorf("the expression has no %s:\n%s", want, expr)
		}
	}
	for _, unwanted := range []string{"quay.io/other/app", "mirror.local/off"} {
		if strings.Contains(expr, unwanted) {
			t.Errorf("the expression names %s, which routes nothing", unwanted)
		}
	}
	if got.UnexpressedExcludes != 1 {
		t.Errorf("UnexpressedExcludes = %d, want 1 (**:debug)", got.UnexpressedExcludes)
	}
	if got.ExpressionBytes != len(expr) || got.Cost > DefaultLimits().CostBudget || got.MaxContainers < 100 {
		t.Errorf("ExpressionBytes %d (len %d), Cost %d (budget %d), MaxContainers %d (want 100 or more)",
			got.ExpressionBytes, len(expr), got.Cost, DefaultLimits().CostBudget, got.MaxContainers)
	}
	t.Logf("%d bytes, %d containers at most, cost %d", got.ExpressionBytes, got.MaxContainers, got.Cost)
}

func TestConditionsWithoutResourcesSendKuikPodsOnly(t *testing.T) {
	got := Conditions(nil, []v1alpha1.ImageMirror{testutil.NewImageMirror("off", "mirror.local/").Policy(v1alpha1.RewritePolicyNone).Build()})
	if got.Reason != ReasonFiltered || len(got.Conditions) != 1 {
		t.Fatalf("Conditions = %+v, want one condition", got)
	}
	if expr := got.Conditions[0].Expression; strings.Contains(expr, "cs.exists") {
		t.Errorf("with nothing to cover, the expression still reads images:\n%s", expr)
	}
}

func TestConditionsBounds(t *testing.T) {
	many := func(n int) routing.Coverage {
		var c routing.Coverage
		for i := range n {
			c.Repositories = append(c.Repositories, fmt.Sprintf("registry.example.com/team-%04d/application", i))
		}
		return c
	}
	costly := routing.Coverage{Mirrors: []routing.MirrorCoverage{{Name: "m", Destination: "mirror.local"}}}
	for i := range 64 {
		costly.Mirrors[0].ExcludeImages = append(costly.Mirrors[0].ExcludeImages, routing.ExcludeGlob{Name: fmt.Sprintf("registry.example.com/**/team-%02d-*/**/component-*-%02d", i, i)})
	}
	cases := map[string]struct {
		cov    routing.Coverage
		lim    func(*Limits)
		reason Reason
		prefix string
	}{
		"within the bounds": {cov: many(100), reason: ReasonFiltered, prefix: "pods are sent when an image may be covered (100 repositories"},
		"too many entries":  {cov: many(2000), reason: ReasonTooLarge, prefix: "the condition would be "},
		"a smaller size bound": {
			cov: many(100), lim: func(l *Limits) { l.MaxExpressionBytes = 4096 }, reason: ReasonTooLarge, prefix: "the condition would be ",
		},
		"excludeImages too costly for every container": {cov: costly, reason: ReasonTooCostly, prefix: "the condition's cost ("},
		"a smaller cost budget": {
			cov: many(1), lim: func(l *Limits) { l.CostBudget = 30_000 }, reason: ReasonTooCostly, prefix: "the condition's cost (",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			lim := DefaultLimits()
			if tc.lim != nil {
				tc.lim(&lim)
			}
			got := ForCoverage(tc.cov, lim)
			if got.Reason != tc.reason || !strings.HasPrefix(got.Message, tc.prefix) {
				t.Fatalf("reason %s, message %q; want %s, %q…", got.Reason, got.Message, tc.reason, tc.prefix)
			}
			if filtered := tc.reason == ReasonFiltered; filtered != (got.Conditions != nil) {
				t.Errorf("conditions %v, want some only when filtered", got.Conditions)
			}
			if got.Conditions != nil && (got.ExpressionBytes > lim.MaxExpressionBytes || got.Cost > lim.CostBudget || got.MaxContainers < lim.MinContainers) {
				t.Errorf("filtered past a bound: %d bytes, cost %d, %d containers", got.ExpressionBytes, got.Cost, got.MaxContainers)
			}
		})
	}
}

func TestConditionsRefuseUnquotableEntries(t *testing.T) {
	got := ForCoverage(routing.Coverage{Repositories: []string{"quay.io/acme/x') || true || ('"}}, DefaultLimits())
	if got.Reason != ReasonUnsafeEntry || got.Conditions != nil {
		t.Errorf("Conditions = %+v, want every pod sent for an entry that cannot be quoted", got)
	}
}
