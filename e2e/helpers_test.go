package e2e_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/authn"
	kauth "github.com/google/go-containerregistry/pkg/authn/kubernetes"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// pollTimeout bounds every wait; the waits themselves end as soon as the outcome is there.
const pollTimeout = 30 * time.Second

// eventually polls check until it returns nil, failing the test with its last error.
func eventually(t *testing.T, what string, check func(ctx context.Context) error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, pollTimeout, true, func(ctx context.Context) (bool, error) {
		last = check(ctx)
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("%s: %v (last: %v)", what, err, last)
	}
}

var nonName = regexp.MustCompile(`[^a-z0-9]+`)

// token is a DNS label unique to the test, for names and label values.
func token(t *testing.T) string {
	n := strings.Trim(nonName.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	if len(n) > 40 {
		n = strings.Trim(n[len(n)-40:], "-")
	}
	return n
}

func (w *world) namespace(t *testing.T, labels map[string]string) string {
	t.Helper()
	ns, err := w.cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-", Labels: labels}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.cs.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{}) })
	return ns.Name
}

// create creates an object as admin and deletes it at cleanup.
func (w *world) create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := w.c.Create(t.Context(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
	t.Cleanup(func() { _ = w.c.Delete(context.Background(), obj) })
}

// createPod creates pods (real creates, through every admission step) until one is admitted as
// until wants: the webhook learns of a new routing resource through its informer, a moment
// after the resource is created. It returns the admitted pod.
func (w *world) createPod(t *testing.T, ns, image string, until func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var got *corev1.Pod
	eventually(t, "pod admitted as expected", func(ctx context.Context) error {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "app-"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}},
		}
		var err error
		if got, err = w.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return err
		}
		if !until(got) {
			return fmt.Errorf("admitted as %s", podSummary(got))
		}
		return nil
	})
	return got
}

func rewritten(p *corev1.Pod) bool { return p.Labels[v1alpha1.LabelRewritten] == "true" }

func podSummary(p *corev1.Pod) string {
	var images []string
	for _, c := range p.Spec.Containers {
		images = append(images, c.Image)
	}
	return fmt.Sprintf("images=%v annotations=%v labels=%v pullSecrets=%v", images, p.Annotations, p.Labels, p.Spec.ImagePullSecrets)
}

// checkRouted asserts what the webhook wrote on a single-container pod it routed.
func checkRouted(t *testing.T, p *corev1.Pod, original, image, by, reason, pullSecret string) {
	t.Helper()
	if diff := cmp.Diff(image, p.Spec.Containers[0].Image); diff != "" {
		t.Errorf("image (-want +got): %s", diff)
	}
	wantAnn := map[string]string{
		v1alpha1.AnnotationOriginalImages: fmt.Sprintf(`{"app":%q}`, original),
		v1alpha1.AnnotationRewrittenBy:    fmt.Sprintf(`{"app":%q}`, by),
		v1alpha1.AnnotationReason:         fmt.Sprintf(`{"app":%q}`, reason),
	}
	if diff := cmp.Diff(wantAnn, p.Annotations); diff != "" {
		t.Errorf("annotations (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{v1alpha1.LabelRewritten: "true"}, p.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]corev1.LocalObjectReference{{Name: pullSecret}}, p.Spec.ImagePullSecrets); diff != "" {
		t.Errorf("imagePullSecrets (-want +got):\n%s", diff)
	}
}

// waitSecret waits until the syncer's Secret exists in ns with exactly these auths (key ->
// "user:password"), and checks the rest of its contract: type, label, owner.
func (w *world) waitSecret(t *testing.T, ns, name string, owner client.Object, want map[string]string) *corev1.Secret {
	t.Helper()
	var got *corev1.Secret
	eventually(t, fmt.Sprintf("secret %s/%s holds %v", ns, name, want), func(ctx context.Context) error {
		s, err := w.cs.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if a := authsOf(t, s); !cmp.Equal(a, want) {
			return fmt.Errorf("holds %v", a)
		}
		got = s
		return nil
	})
	if got.Type != corev1.SecretTypeDockerConfigJson {
		t.Errorf("secret type %q, want %q", got.Type, corev1.SecretTypeDockerConfigJson)
	}
	if diff := cmp.Diff(map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedBySecretSyncer}, got.Labels); diff != "" {
		t.Errorf("secret labels (-want +got):\n%s", diff)
	}
	gvk, err := w.c.GroupVersionKindFor(owner)
	if err != nil {
		t.Fatal(err)
	}
	wantOwner := []metav1.OwnerReference{{
		APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: owner.GetName(), UID: owner.GetUID(), Controller: ptr.To(true),
	}}
	if diff := cmp.Diff(wantOwner, got.OwnerReferences); diff != "" {
		t.Errorf("secret ownerReferences (-want +got):\n%s", diff)
	}
	return got
}

// authsOf decodes a .dockerconfigjson into auths key -> "user:password" (from username and
// password, or auth).
func authsOf(t *testing.T, s *corev1.Secret) map[string]string {
	t.Helper()
	var doc struct {
		Auths map[string]struct{ Username, Password, Auth string } `json:"auths"`
	}
	if err := json.Unmarshal(s.Data[corev1.DockerConfigJsonKey], &doc); err != nil {
		t.Fatalf("secret %s/%s: %v", s.Namespace, s.Name, err)
	}
	out := map[string]string{}
	for k, v := range doc.Auths {
		up := v.Username + ":" + v.Password
		if v.Username == "" {
			b, err := base64.StdEncoding.DecodeString(v.Auth)
			if err != nil {
				t.Fatalf("secret %s/%s, auths %s: %v", s.Namespace, s.Name, k, err)
			}
			up = string(b)
		}
		out[k] = up
	}
	return out
}

// waitGone waits until the Secret no longer exists.
func (w *world) waitGone(t *testing.T, ns, name string) {
	t.Helper()
	eventually(t, fmt.Sprintf("secret %s/%s collected", ns, name), func(ctx context.Context) error {
		_, err := w.cs.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return errors.New("still there")
	})
}

// pullSecretsOf reads a pod's imagePullSecrets, as the kubelet does (admin here); a missing one
// is skipped, as the kubelet skips it.
func (w *world) pullSecretsOf(t *testing.T, p *corev1.Pod) []corev1.Secret {
	t.Helper()
	var out []corev1.Secret
	for _, ref := range p.Spec.ImagePullSecrets {
		s, err := w.cs.CoreV1().Secrets(p.Namespace).Get(t.Context(), ref.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, *s)
	}
	return out
}

// pull fetches the manifest of image (HEAD, then GET) with the credentials the kubelet would
// pick from these pull Secrets (go-containerregistry's Kubernetes keychain, the kubelet's
// keyring rules), or anonymously with none.
func pull(ctx context.Context, image string, secrets []corev1.Secret) error {
	kc, err := kauth.NewFromPullSecrets(ctx, secrets)
	if err != nil {
		return fmt.Errorf("building keychain: %w", err)
	}
	ref, err := name.ParseReference(image, name.Insecure)
	if err != nil {
		return err
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.NewMultiKeychain(kc))}
	head, err := remote.Head(ref, opts...)
	if err != nil {
		return err
	}
	got, err := remote.Get(ref, opts...)
	if err != nil {
		return err
	}
	if got.Digest != head.Digest {
		return fmt.Errorf("GET digest %s, HEAD digest %s", got.Digest, head.Digest)
	}
	return nil
}

// checkPulls proves a routed pod can pull its image with its pull Secrets, and that without
// kuik's Secret the registry answers 401.
func (w *world) checkPulls(t *testing.T, p *corev1.Pod) {
	t.Helper()
	image := p.Spec.Containers[0].Image
	secrets := w.pullSecretsOf(t, p)
	if len(secrets) != len(p.Spec.ImagePullSecrets) {
		t.Fatalf("pod %s/%s: %d of its %d pull Secrets exist", p.Namespace, p.Name, len(secrets), len(p.Spec.ImagePullSecrets))
	}
	if err := pull(t.Context(), image, secrets); err != nil {
		t.Errorf("pulling %s with the pod's pull Secrets: %v", image, err)
	}
	err := pull(t.Context(), image, nil)
	var terr *transport.Error
	if !errors.As(err, &terr) || terr.StatusCode != http.StatusUnauthorized {
		t.Errorf("pulling %s without kuik's Secret: %v, want a 401", image, err)
	}
}

// grant gives users a ClusterRole (namespace "") or a Role in namespace with these rules.
func (w *world) grant(t *testing.T, name string, rules []rbacv1.PolicyRule, namespace string, users ...string) {
	t.Helper()
	var subjects []rbacv1.Subject
	for _, u := range users {
		subjects = append(subjects, rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: "User", Name: u})
	}
	if namespace == "" {
		w.create(t, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules})
		w.create(t, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}, Subjects: subjects})
		return
	}
	w.create(t, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Rules: rules})
	w.create(t, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}, Subjects: subjects})
}

func key(obj client.Object) types.NamespacedName { return client.ObjectKeyFromObject(obj) }
