package webhook_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// A reference to a Secret no Secret can be named (here with capitals and an underscore) never
// resolves: the validating webhook refuses it at admission, naming the field, instead of the
// resource being admitted and its entry failing later.
func TestASecretRefNoSecretCanHaveIsRefusedNamingTheField(t *testing.T) {
	w := setup(t)
	ia := testutil.NewImageAlternative("bad-secret-name").Repository("quay.io/acme/app").
		Repository("registry.local/acme/app").SecretRef("Not_A_Name").Build()
	refusal := firstRefusal(t, func(ctx context.Context) error {
		return w.c.Create(ctx, ia.DeepCopy(), client.DryRunAll)
	})
	wantRefusal(t, refusal, `spec.alternatives[1].auth.secretRef.name: Invalid value: "Not_A_Name"`)
}

// A pod whose annotations are just under the API server's 256 KiB limit is admitted: kuik's
// records would take it over, so kuik admits it unchanged, with a warning, rather than have the
// API server refuse a pod it would have admitted without kuik.
func TestAPodNearTheAnnotationLimitIsNotRefusedBecauseOfKuik(t *testing.T) {
	w := setup(t)
	ns := w.namespace(t, map[string]string{"annotations": "full"})
	upstream := w.down + "/acme/full"
	ia := testutil.NewImageAlternative("full-annotations").NamespaceSelector(map[string]string{"annotations": "full"}).
		Repository(upstream).Repository(w.registry.Host + "/acme/app").Insecure().SecretRef("private-registry").Build()
	w.create(t, &ia)
	// Routed once the webhook's index holds the resource.
	w.createPod(t, ns, simplePod(upstream+":v1"), func(p *corev1.Pod) bool { return p.Labels[v1alpha1.LabelRewritten] == "true" })

	const key = "example.com/blob"
	p := simplePod(upstream + ":v1")
	p.Annotations = map[string]string{key: strings.Repeat("b", apivalidation.TotalAnnotationSizeLimitB-64-len(key))}
	var warnings []string
	cfg := cp.Config()
	cfg.WarningHandler = warningCollector(&warnings)
	got, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("pod refused: %v", err)
	}
	if got.Spec.Containers[0].Image != upstream+":v1" || len(got.Annotations) != 1 {
		t.Errorf("pod changed: images %s, %d annotations, labels %v", got.Spec.Containers[0].Image, len(got.Annotations), got.Labels)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "image routing skipped") {
		t.Errorf("warnings = %q, want kuik's", warnings)
	}
}
