package syncer

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

func TestRecordName(t *testing.T) {
	if got := RetentionName(routing.KindImageAlternative, "acme"); got != "kuik-retain-imagealternative-acme" {
		t.Errorf("RetentionName = %q", got)
	}
	long := strings.Repeat("a", 253)
	got := RetentionName(routing.KindImageMirror, long)
	if msgs := validation.IsDNS1123Subdomain(got); len(msgs) > 0 {
		t.Errorf("RetentionName of a 253-character name = %q: %v", got, msgs)
	}
	if other := RetentionName(routing.KindImageMirror, long[:252]+"b"); other == got {
		t.Errorf("two long names share the record %q", got)
	}
}

// toConfigMap turns an apply request into the object the API server would store.
func toConfigMap(t *testing.T, r *Resource, usage map[string]Usage) *corev1.ConfigMap {
	t.Helper()
	ac, err := RetentionApplyConfiguration(r, "kuik-system", usage)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(ac)
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := json.Unmarshal(b, &cm); err != nil {
		t.Fatal(err)
	}
	return &cm
}

// A retention record keeps live entries without time and retained ones with theirs, and reads back
// as the usage a restart starts from: a live entry counts as used at the next decision.
func TestRetentionRoundTrip(t *testing.T) {
	r := mustAlternative(t, testutil.NewImageAlternative("acme").Repository("quay.io/acme/foo").SecretRef("creds"))
	used := time.Date(2026, 11, 1, 12, 0, 0, 123, time.FixedZone("CET", 3600))
	usage := map[string]Usage{
		"team-a": {"quay.io/acme/foo": {Live: true, LastUsed: used}, "quay.io/acme/bar": {LastUsed: used}},
		"team-b": {},
	}
	cm := toConfigMap(t, r, usage)
	if cm.Name != "kuik-retain-imagealternative-acme" || cm.Namespace != "kuik-system" ||
		cm.Labels[v1alpha1.LabelManagedBy] != v1alpha1.ManagedBySecretSyncer {
		t.Errorf("record %s/%s labels %v", cm.Namespace, cm.Name, cm.Labels)
	}
	wantOwner := []metav1.OwnerReference{{APIVersion: "kuik.enix.io/v1alpha1", Kind: "ImageAlternative", Name: "acme", UID: r.UID, Controller: ptr.To(true)}}
	if diff := cmp.Diff(wantOwner, cm.OwnerReferences); diff != "" {
		t.Errorf("ownerReferences (-want +got):\n%s", diff)
	}
	wantData := map[string]string{"team-a": `{"quay.io/acme/bar":{"lastUsed":"2026-11-01T11:00:00.000000123Z"},"quay.io/acme/foo":{"live":true}}`}
	if diff := cmp.Diff(wantData, cm.Data); diff != "" {
		t.Errorf("data (-want +got):\n%s", diff)
	}

	rec, err := ParseRetention(cm)
	if err != nil {
		t.Fatal(err)
	}
	want := Retention{
		Resource: ResourceKey{Kind: routing.KindImageAlternative, Name: "acme"},
		UID:      r.UID,
		Usage:    map[string]Usage{"team-a": {"quay.io/acme/foo": {Live: true}, "quay.io/acme/bar": {LastUsed: used.UTC()}}},
	}
	if diff := cmp.Diff(want, rec); diff != "" {
		t.Errorf("record (-want +got):\n%s", diff)
	}
	// What a restart decides from it: the live entry is kept from now, the other keeps its time.
	now := used.Add(10 * time.Minute)
	keep, next, expiry := Retain(now, 15*time.Minute, nil, rec.Usage["team-a"])
	if diff := cmp.Diff([]string{"quay.io/acme/bar", "quay.io/acme/foo"}, keep); diff != "" {
		t.Errorf("kept (-want +got):\n%s", diff)
	}
	if !next["quay.io/acme/foo"].LastUsed.Equal(now) || !expiry.Equal(used.Add(15*time.Minute)) {
		t.Errorf("next %v, expiry %v", next, expiry)
	}
}

func TestSameRetention(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	tests := map[string]struct {
		a, b Usage
		want bool
	}{
		"nothing and nothing":                {nil, Usage{}, true},
		"a live entry seen again later":      {Usage{"k": {Live: true, LastUsed: t0}}, Usage{"k": {Live: true, LastUsed: t0.Add(time.Minute)}}, true},
		"a live entry no longer used":        {Usage{"k": {Live: true, LastUsed: t0}}, Usage{"k": {LastUsed: t0}}, false},
		"an entry used for the first time":   {Usage{}, Usage{"k": {Live: true, LastUsed: t0}}, false},
		"a retained entry expiring":          {Usage{"k": {LastUsed: t0}}, Usage{}, false},
		"a retained entry in another zone":   {Usage{"k": {LastUsed: t0}}, Usage{"k": {LastUsed: t0.In(time.FixedZone("X", 7200))}}, true},
		"a restored live entry, live again":  {Usage{"k": {Live: true}}, Usage{"k": {Live: true, LastUsed: t0}}, true},
		"a restored retained entry, as such": {Usage{"k": {LastUsed: t0}}, Usage{"k": {LastUsed: t0}}, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := sameRetention(tc.a, tc.b); got != tc.want {
				t.Errorf("sameRetention = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParseRetentionRefusesWhatItDidNotWrite(t *testing.T) {
	r := mustMirror(t, testutil.NewImageMirror("m", "registry.tld/mirror/").SecretRef("creds"))
	good := toConfigMap(t, r, map[string]Usage{"team-a": {"registry.tld/mirror": {Live: true}}})
	tests := map[string]struct {
		mutate  func(*corev1.ConfigMap)
		wantErr bool
		want    map[string]Usage
	}{
		"no owner": {
			mutate:  func(cm *corev1.ConfigMap) { cm.OwnerReferences = nil },
			wantErr: true, want: nil,
		},
		"an owner that is not a routing resource": {
			mutate:  func(cm *corev1.ConfigMap) { cm.OwnerReferences[0].APIVersion = "apps/v1" },
			wantErr: true, want: nil,
		},
		"a name that is not its owner's record": {
			mutate:  func(cm *corev1.ConfigMap) { cm.Name = "kuik-retain-imagemirror-other" },
			wantErr: true, want: nil,
		},
		"a namespace that does not parse is left out, the others read": {
			mutate: func(cm *corev1.ConfigMap) {
				cm.Data["team-b"] = "{"
				cm.Data["Not_A_Namespace"] = `{"registry.tld/mirror":{"live":true}}`
			},
			wantErr: true,
			want:    map[string]Usage{"team-a": {"registry.tld/mirror": {Live: true}}},
		},
		"an entry with neither live nor a time is no use": {
			mutate:  func(cm *corev1.ConfigMap) { cm.Data["team-a"] = `{"registry.tld/mirror":{}}` },
			wantErr: false, want: map[string]Usage{},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cm := good.DeepCopy()
			tc.mutate(cm)
			rec, err := ParseRetention(cm)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, rec.Usage); diff != "" {
				t.Errorf("usage (-want +got):\n%s", diff)
			}
		})
	}
}
