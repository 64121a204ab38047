package node_test

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/testutil/fakeprovider"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// The providers of the shared install whose plugins call their registry over HTTPS before they
// answer (FAKE_PROVIDER_CHECK_URL): privateTLSProvider's registry has a certificate of the CA
// given as the chart's caBundle.pem, untrustedTLSProvider's one of a CA kuik was not given.
const (
	privateTLSProvider   = "fake-private-tls"
	untrustedTLSProvider = "fake-untrusted-tls"
)

// checkURL is the plugin environment that makes it GET r's /v2/ over HTTPS before it answers.
func checkURL(r *providerRegistry) map[string]any {
	return map[string]any{"name": fakeprovider.EnvCheckURL, "value": "https://" + r.Host + "/v2/"}
}

// tlsResource routes upstream to r's repository over HTTPS (no insecure), with the credential
// of provider injected.
func tlsResource(name, selector, upstream string, r *providerRegistry, provider string) *v1alpha1.ImageAlternative {
	return &v1alpha1.ImageAlternative{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.ImageAlternativeSpec{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"e2e": selector}},
			Alternatives: []v1alpha1.Alternative{
				{Repository: upstream, Insecure: true},
				{Repository: r.Host + "/acme/tls", Auth: &v1alpha1.Auth{
					Provider:         &v1alpha1.ProviderAuth{Name: provider},
					InjectPullSecret: ptr.To(true),
				}},
			},
		},
	}
}

// A registry signed by a private CA, given once through the chart's caBundle.pem: the
// credential-provider plugin the syncer starts (a Go program, no SSL_CERT_FILE or other variable
// set) verifies it, the webhook probes it over HTTPS, and the kubelet pulls the routed image from
// it (containerd is given the CA by the node's own configuration, as an operator does). A
// plugin calling a server of a CA kuik was not given fails: the roots are not "anything goes".
func TestPrivateCAFromTheChartValueIsTrustedByPluginsAndProbes(t *testing.T) {
	w := env(t)
	w.kuikState(t)
	p := w.privateTLS
	image := p.pushGuest(t, w.n, "acme/tls:v1")
	upstream := w.down + "/acme/tls"
	selected := w.namespace(t, map[string]string{"e2e": "private-ca"})
	mark := p.mark()
	w.create(t, tlsResource("private-ca", "private-ca", upstream, p, privateTLSProvider))

	original := upstream + ":v1"
	pd := pod("app", original)
	pd.Spec.Containers[0].ImagePullPolicy = corev1.PullAlways
	got, created := w.createPodUntil(t, selected, pd, rewritten)
	checkRouted(t, got, original, image, "ImageAlternative/private-ca", "OnFailure", "kuik-inject-imagealternative-private-ca")
	took := w.waitRunning(t, selected, "app", created)

	c := p.tally(mark)
	checks, probed, manifests, blobs := c.checks, c.probed, c.manifests, c.blobs
	if checks == 0 {
		t.Error("the plugin's HTTPS call never reached the registry: it did not verify the private CA's certificate")
	}
	if probed == 0 {
		t.Error("the webhook made no authenticated manifest request over HTTPS")
	}
	if manifests == 0 || blobs == 0 {
		t.Errorf("containerd fetched %d manifests and %d blobs over HTTPS, want some of each", manifests, blobs)
	}
	t.Logf("over HTTPS with the private CA: %d plugin calls, %d webhook probes, %d manifest and %d blob requests by containerd; pod Running %.2fs after its creation",
		checks, probed, manifests, blobs, took.Seconds())

	t.Run("a plugin calling a server of a CA kuik was not given fails", func(t *testing.T) {
		u := w.untrustedTLS
		mark := u.mark()
		ia := tlsResource("untrusted-ca", "untrusted-ca", w.down+"/acme/untrusted", u, untrustedTLSProvider)
		w.create(t, ia)
		eventually(t, "ImageAlternative/untrusted-ca not Ready, its provider failed", func(ctx context.Context) error {
			var got v1alpha1.ImageAlternative
			if err := w.c.Get(ctx, client.ObjectKeyFromObject(ia), &got); err != nil {
				return err
			}
			c := apimeta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
			if c == nil || c.ObservedGeneration != got.Generation || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonProviderFailed {
				return fmt.Errorf("conditions %+v", got.Status.Conditions)
			}
			return nil
		})
		for _, r := range u.requests(mark) {
			t.Errorf("the untrusted server received %s %s from %q: its certificate was accepted", r.Method, r.Path, r.UserAgent)
		}
	})
}
