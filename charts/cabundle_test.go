package charts_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/enix/kuik/internal/testenv"
)

// caMount is what both containers must mount for caBundle: one file beside the images' bundle.
var caMount = corev1.VolumeMount{Name: "ca-bundle", MountPath: "/etc/ssl/certs/kuik-extra-ca.crt", SubPath: "kuik-extra-ca.crt", ReadOnly: true}

func caVolume(d *appsv1.Deployment) *corev1.Volume {
	for i, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == "ca-bundle" {
			return &d.Spec.Template.Spec.Volumes[i]
		}
	}
	return nil
}

func caMounts(d *appsv1.Deployment) []corev1.VolumeMount {
	var out []corev1.VolumeMount
	for _, m := range d.Spec.Template.Spec.Containers[0].VolumeMounts {
		if m.Name == "ca-bundle" || strings.HasPrefix(m.MountPath, "/etc/ssl") {
			out = append(out, m)
		}
	}
	return out
}

func newCAPEM(t *testing.T) string {
	t.Helper()
	ca, err := testenv.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	return string(ca.PEM)
}

// mergeValues is a over b, one level deep (enough for disjoint top-level keys).
func mergeValues(a, b map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range b {
		out[k] = v
	}
	for k, v := range a {
		out[k] = v
	}
	return out
}

func TestCABundle(t *testing.T) {
	pemA, pemB := newCAPEM(t), newCAPEM(t)
	inline := func(p string) map[string]any { return map[string]any{"caBundle": map[string]any{"pem": p}} }
	for name, tc := range map[string]struct {
		values    map[string]any
		configMap string // the ConfigMap the pods mount, "" for none
		key       string
		rendered  bool // the chart renders that ConfigMap itself
	}{
		"off by default":                   {},
		"inline PEM":                       {values: inline(pemA), configMap: "kuik-ca-bundle", key: "ca.crt", rendered: true},
		"inline PEM with provider plugins": {values: mergeValues(inline(pemA), providerValues(hostPathBinDir)), configMap: "kuik-ca-bundle", key: "ca.crt", rendered: true},
		"existing ConfigMap": {
			values:    map[string]any{"caBundle": map[string]any{"configMap": map[string]any{"name": "corp-roots", "key": "bundle.pem"}}},
			configMap: "corp-roots", key: "bundle.pem",
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := render(t, tc.values)
			cm := r.Find("ConfigMap", "kuik-ca-bundle")
			if (cm != nil) != tc.rendered {
				t.Fatalf("ConfigMap kuik-ca-bundle rendered: %t, want %t", cm != nil, tc.rendered)
			}
			if tc.rendered {
				if got := convert[corev1.ConfigMap](t, cm).Data["ca.crt"]; got != pemA {
					t.Errorf("ConfigMap kuik-ca-bundle ca.crt = %q, want the PEM given", got)
				}
			}
			for name, d := range deployments(t, r) {
				v := caVolume(d)
				if tc.configMap == "" {
					if v != nil || len(caMounts(d)) != 0 {
						t.Errorf("%s: volume %+v, mounts %+v, want none", name, v, caMounts(d))
					}
					continue
				}
				want := &corev1.Volume{Name: "ca-bundle", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: tc.configMap},
					Items:                []corev1.KeyToPath{{Key: tc.key, Path: "kuik-extra-ca.crt"}},
				}}}
				if diff := cmp.Diff(want, v); diff != "" {
					t.Errorf("%s: ca-bundle volume (-want +got):\n%s", name, diff)
				}
				if diff := cmp.Diff([]corev1.VolumeMount{caMount}, caMounts(d)); diff != "" {
					t.Errorf("%s: mounts under /etc/ssl (-want +got):\n%s", name, diff)
				}
				if env := d.Spec.Template.Spec.Containers[0].Env; len(env) != 0 {
					t.Errorf("%s: env %v: the extra CAs must need no environment variable", name, env)
				}
			}
		})
	}

	t.Run("a new inline PEM rolls both Deployments", func(t *testing.T) {
		a, b := deployments(t, render(t, inline(pemA))), deployments(t, render(t, inline(pemB)))
		for name := range a {
			ka, kb := a[name].Spec.Template.Annotations["kuik.enix.io/ca-bundle-checksum"], b[name].Spec.Template.Annotations["kuik.enix.io/ca-bundle-checksum"]
			if ka == "" || ka == kb {
				t.Errorf("%s: checksum annotation %q then %q, want two different ones", name, ka, kb)
			}
		}
	})

	for name, values := range map[string]map[string]any{
		"both an inline PEM and a ConfigMap": {"caBundle": map[string]any{"pem": pemA, "configMap": map[string]any{"name": "corp-roots"}}},
		"a PEM with no certificate":          inline("not a certificate"),
		"an empty ConfigMap key":             {"caBundle": map[string]any{"configMap": map[string]any{"name": "corp-roots", "key": ""}}},
	} {
		t.Run("refuses "+name, func(t *testing.T) {
			if err := renderErr(values); err == nil {
				t.Errorf("rendered, want an error naming caBundle")
			} else if !strings.Contains(err.Error(), "caBundle") {
				t.Errorf("error %q does not name caBundle", err)
			}
		})
	}
}
