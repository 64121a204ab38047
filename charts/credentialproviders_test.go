package charts_test

import (
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	kubeletconfigv1 "k8s.io/kubelet/config/v1"
	psaapi "k8s.io/pod-security-admission/api"
	psapolicy "k8s.io/pod-security-admission/policy"

	"github.com/enix/kuik/charts"
)

const (
	providersConfigMap = "kuik-credential-providers"
	configFlag         = "--image-credential-provider-config="
	binDirFlag         = "--image-credential-provider-bin-dir="
	// nodeConfigFlag is the secret-syncer's copy of the webhook's configFlag: the nodes'
	// providers, for its missed-pull decisions.
	nodeConfigFlag = "--node-credential-provider-config="
)

// ecrProvider is the EKS AMI's provider entry (nodeadm's template), as a user copies it.
func ecrProvider() map[string]any {
	return map[string]any{
		"name":                 "ecr-credential-provider",
		"matchImages":          []any{"*.dkr.ecr.*.amazonaws.com", "*.dkr.ecr.*.amazonaws.com.cn"},
		"defaultCacheDuration": "12h",
		"apiVersion":           "credentialprovider.kubelet.k8s.io/v1",
	}
}

// providerValues are the values of one way to give the syncer its plugins: the inline ECR
// configuration and binDir.
func providerValues(binDir map[string]any) map[string]any {
	return map[string]any{"credentialProviders": map[string]any{
		"config": map[string]any{"providers": []any{ecrProvider()}},
		"binDir": binDir,
	}}
}

var (
	hostPathBinDir    = map[string]any{"hostPath": "/etc/eks/image-credential-provider"}
	imageVolumeBinDir = map[string]any{"image": map[string]any{
		"repository": "registry.example.com/plugins", "tag": "v1", "digest": "sha256:" + strings.Repeat("a", 64), "path": "/bin",
	}}
	initContainerBinDir = map[string]any{"image": map[string]any{
		"repository": "registry.example.com/plugins", "tag": "v1", "mode": "initContainer", "path": "/plugins/",
	}}
)

func init() {
	valueSets["credential providers from the node"] = providerValues(hostPathBinDir)
	valueSets["credential providers from an image volume"] = providerValues(imageVolumeBinDir)
	valueSets["credential providers copied by an init container"] = providerValues(initContainerBinDir)
}

// flagValue returns the value of --name=value in args and whether it is there.
func flagValue(args []string, prefix string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, prefix); ok {
			return v, true
		}
	}
	return "", false
}

// mountOf returns the volume mount of c that holds p (the longest mountPath prefix of p) and
// the pod's volume it mounts.
func mountOf(t *testing.T, spec corev1.PodSpec, c corev1.Container, p string) (corev1.VolumeMount, corev1.Volume, string) {
	t.Helper()
	var best *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if (p == m.MountPath || strings.HasPrefix(p, strings.TrimSuffix(m.MountPath, "/")+"/")) && (best == nil || len(m.MountPath) > len(best.MountPath)) {
			best = &c.VolumeMounts[i]
		}
	}
	if best == nil {
		t.Fatalf("container %s mounts nothing at %s (mounts %+v)", c.Name, p, c.VolumeMounts)
	}
	for _, v := range spec.Volumes {
		if v.Name == best.Name {
			rel := strings.TrimPrefix(strings.TrimPrefix(p, best.MountPath), "/")
			return *best, v, rel
		}
	}
	t.Fatalf("container %s mounts volume %s, which the pod lacks", c.Name, best.Name)
	return corev1.VolumeMount{}, corev1.Volume{}, ""
}

// decodeProviderConfig decodes a CredentialProviderConfig strictly, with the kubelet's
// published types, as the syncer reads it.
func decodeProviderConfig(t *testing.T, data string) *kubeletconfigv1.CredentialProviderConfig {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := kubeletconfigv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	codecs := serializer.NewCodecFactory(scheme, serializer.EnableStrict)
	obj, gvk, err := codecs.UniversalDeserializer().Decode([]byte(data), nil, nil)
	if err != nil {
		t.Fatalf("the rendered configuration does not decode as the kubelet's: %v\n%s", err, data)
	}
	cfg, ok := obj.(*kubeletconfigv1.CredentialProviderConfig)
	if !ok {
		t.Fatalf("the rendered configuration is a %s", gvk)
	}
	return cfg
}

type providerPods struct {
	syncer, webhook *appsv1.Deployment
}

func (p providerPods) syncerContainer() corev1.Container {
	return p.syncer.Spec.Template.Spec.Containers[0]
}
func (p providerPods) webhookContainer() corev1.Container {
	return p.webhook.Spec.Template.Spec.Containers[0]
}

func providerDeployments(t *testing.T, r *charts.Rendered) providerPods {
	t.Helper()
	d := deployments(t, r)
	return providerPods{syncer: d["kuik-secret-syncer"], webhook: d["kuik-webhook"]}
}

// Without a configuration the chart renders what it always did: no ConfigMap, no flag, no
// volume, no init container, no annotation, no token rights.
func TestCredentialProvidersOff(t *testing.T) {
	for name, values := range map[string]map[string]any{
		"defaults": nil,
		"defaults spelt out": {"credentialProviders": map[string]any{
			"config": map[string]any{}, "existingConfigMap": "", "binDir": map[string]any{"hostPath": "", "image": map[string]any{"repository": ""}},
			"serviceAccountTokens": map[string]any{"enabled": false},
		}},
	} {
		t.Run(name, func(t *testing.T) {
			r := render(t, values)
			if len(r.OfKind("ConfigMap")) != 0 {
				t.Errorf("ConfigMaps rendered: %v", r.OfKind("ConfigMap"))
			}
			if strings.Contains(r.Manifest, "credential-provider") {
				t.Error("the manifest mentions credential providers")
			}
			p := providerDeployments(t, r)
			s := p.syncer.Spec.Template.Spec
			if len(s.Volumes) != 0 || len(s.InitContainers) != 0 || len(s.Containers) != 1 || len(s.Containers[0].VolumeMounts) != 0 || len(p.syncer.Spec.Template.Annotations) != 0 {
				t.Errorf("secret-syncer pod: volumes %v, init containers %v, mounts %v, annotations %v", s.Volumes, s.InitContainers, s.Containers[0].VolumeMounts, p.syncer.Spec.Template.Annotations)
			}
			w := p.webhook.Spec.Template.Spec
			if len(w.Volumes) != 1 || w.Volumes[0].Name != "tls" || len(w.Containers[0].VolumeMounts) != 1 || len(p.webhook.Spec.Template.Annotations) != 0 {
				t.Errorf("webhook pod: volumes %v, mounts %v, annotations %v", w.Volumes, w.Containers[0].VolumeMounts, p.webhook.Spec.Template.Annotations)
			}
			for _, c := range []corev1.Container{p.syncerContainer(), p.webhookContainer()} {
				for _, f := range []string{configFlag, binDirFlag} {
					if v, ok := flagValue(c.Args, f); ok {
						t.Errorf("%s gets %s%s", c.Name, f, v)
					}
				}
			}
			cluster, _ := rulesOf(t, r, "kuik-secret-syncer")
			if allows(cluster, "create", "", "serviceaccounts/token") || allows(cluster, "get", "", "serviceaccounts") {
				t.Error("the secret-syncer may create tokens or read ServiceAccounts")
			}
		})
	}
}

// An inline configuration becomes a ConfigMap holding the kubelet's file, which both
// components mount read-only and are pointed at; only the syncer gets a bin dir.
func TestCredentialProvidersInlineConfig(t *testing.T) {
	r := render(t, providerValues(hostPathBinDir))
	cm := convert[corev1.ConfigMap](t, r.Find("ConfigMap", providersConfigMap))
	if cm.Namespace != ns {
		t.Errorf("ConfigMap in %q", cm.Namespace)
	}
	cfg := decodeProviderConfig(t, cm.Data["config.yaml"])
	if cfg.APIVersion != "kubelet.config.k8s.io/v1" || cfg.Kind != "CredentialProviderConfig" {
		t.Errorf("apiVersion %q, kind %q", cfg.APIVersion, cfg.Kind)
	}
	if len(cfg.Providers) != 1 {
		t.Fatalf("providers = %+v", cfg.Providers)
	}
	got := cfg.Providers[0]
	if got.Name != "ecr-credential-provider" || got.APIVersion != "credentialprovider.kubelet.k8s.io/v1" || got.DefaultCacheDuration == nil || got.DefaultCacheDuration.Hours() != 12 ||
		!slices.Equal(got.MatchImages, []string{"*.dkr.ecr.*.amazonaws.com", "*.dkr.ecr.*.amazonaws.com.cn"}) {
		t.Errorf("provider = %+v", got)
	}

	p := providerDeployments(t, r)
	for _, d := range []*appsv1.Deployment{p.syncer, p.webhook} {
		c := d.Spec.Template.Spec.Containers[0]
		file, ok := flagValue(c.Args, configFlag)
		if !ok {
			t.Fatalf("%s has no %s (args %v)", d.Name, configFlag, c.Args)
		}
		m, v, rel := mountOf(t, d.Spec.Template.Spec, c, file)
		if !m.ReadOnly || v.ConfigMap == nil || v.ConfigMap.Name != providersConfigMap {
			t.Errorf("%s: %s is on mount %+v of volume %+v, want the ConfigMap read-only", d.Name, file, m, v)
			continue
		}
		if !slices.ContainsFunc(v.ConfigMap.Items, func(k corev1.KeyToPath) bool { return k.Path == rel && cm.Data[k.Key] != "" }) {
			t.Errorf("%s: %s is not a key of the ConfigMap (items %+v)", d.Name, file, v.ConfigMap.Items)
		}
	}
	if v, ok := flagValue(p.webhookContainer().Args, binDirFlag); ok {
		t.Errorf("the webhook gets a bin dir %s: it never runs plugins", v)
	}
	if _, ok := flagValue(p.syncerContainer().Args, binDirFlag); !ok {
		t.Errorf("the secret-syncer has no %s (args %v)", binDirFlag, p.syncerContainer().Args)
	}

	// A changed configuration restarts both (the pod template changes); the same one does not.
	const key = "kuik.enix.io/credential-providers-checksum"
	sum := p.syncer.Spec.Template.Annotations[key]
	if sum == "" || p.webhook.Spec.Template.Annotations[key] != sum {
		t.Errorf("checksum annotations: syncer %q, webhook %q", sum, p.webhook.Spec.Template.Annotations[key])
	}
	if again := providerDeployments(t, render(t, providerValues(hostPathBinDir))); again.syncer.Spec.Template.Annotations[key] != sum {
		t.Error("the same configuration renders another checksum")
	}
	changed := providerValues(hostPathBinDir)
	ecr := ecrProvider()
	ecr["defaultCacheDuration"] = "6h"
	changed["credentialProviders"].(map[string]any)["config"] = map[string]any{"providers": []any{ecr}}
	if c := providerDeployments(t, render(t, changed)); c.syncer.Spec.Template.Annotations[key] == sum || c.webhook.Spec.Template.Annotations[key] == sum {
		t.Error("a changed configuration keeps the checksum")
	}
	// Pod annotations of the values stay beside it.
	withAnn := providerValues(hostPathBinDir)
	withAnn["syncer"] = map[string]any{"podAnnotations": map[string]any{"team": "platform"}}
	if a := providerDeployments(t, render(t, withAnn)).syncer.Spec.Template.Annotations; a["team"] != "platform" || a[key] != sum {
		t.Errorf("syncer pod annotations = %v", a)
	}

	// Written in full (apiVersion and kind given) it renders the same file.
	full := providerValues(hostPathBinDir)
	full["credentialProviders"].(map[string]any)["config"] = map[string]any{
		"apiVersion": "kubelet.config.k8s.io/v1", "kind": "CredentialProviderConfig", "providers": []any{ecrProvider()},
	}
	if got := convert[corev1.ConfigMap](t, render(t, full).Find("ConfigMap", providersConfigMap)).Data; !cmp.Equal(got, cm.Data) {
		t.Errorf("with apiVersion and kind given, the ConfigMap differs:\n%s", cmp.Diff(cm.Data, got))
	}
}

// The webhook's configuration says what the nodes pull with credentials of their own: when
// only kuik has the plugins (sameAsNodes false) the webhook is not given it; the syncer is.
func TestCredentialProvidersNotOnTheNodes(t *testing.T) {
	values := providerValues(imageVolumeBinDir)
	values["credentialProviders"].(map[string]any)["sameAsNodes"] = false
	r := render(t, values)
	p := providerDeployments(t, r)
	if _, ok := flagValue(p.syncerContainer().Args, configFlag); !ok {
		t.Errorf("the secret-syncer lost its configuration: %v", p.syncerContainer().Args)
	}
	if r.Find("ConfigMap", providersConfigMap) == nil {
		t.Error("no ConfigMap for the secret-syncer")
	}
	w := p.webhook.Spec.Template
	if v, ok := flagValue(p.webhookContainer().Args, configFlag); ok || len(w.Spec.Volumes) != 1 || len(w.Spec.Containers[0].VolumeMounts) != 1 || len(w.Annotations) != 0 {
		t.Errorf("webhook: %s=%q, volumes %v, annotations %v: want none of the configuration", configFlag, v, w.Spec.Volumes, w.Annotations)
	}
	// The default is what a node's own plugins (hostPath) mean: the webhook reads it.
	if _, ok := flagValue(providerDeployments(t, render(t, providerValues(hostPathBinDir))).webhookContainer().Args, configFlag); !ok {
		t.Error("by default the webhook is not given the configuration")
	}
}

// tokenAttributes and the other optional fields pass through to the file unchanged.
func TestCredentialProvidersConfigFields(t *testing.T) {
	p := ecrProvider()
	p["name"] = "gcp"
	p["args"] = []any{"get-credentials", "--v=3"}
	p["env"] = []any{map[string]any{"name": "AWS_REGION", "value": "eu-west-3"}}
	p["tokenAttributes"] = map[string]any{
		"serviceAccountTokenAudience": "sts.example.com", "cacheType": "ServiceAccount", "requireServiceAccount": true,
		"requiredServiceAccountAnnotationKeys": []any{"example.com/role"},
	}
	values := providerValues(hostPathBinDir)
	values["credentialProviders"].(map[string]any)["config"] = map[string]any{"providers": []any{p}}
	cfg := decodeProviderConfig(t, convert[corev1.ConfigMap](t, render(t, values).Find("ConfigMap", providersConfigMap)).Data["config.yaml"])
	got := cfg.Providers[0]
	if !slices.Equal(got.Args, []string{"get-credentials", "--v=3"}) || len(got.Env) != 1 || got.Env[0] != (kubeletconfigv1.ExecEnvVar{Name: "AWS_REGION", Value: "eu-west-3"}) {
		t.Errorf("args %v env %v", got.Args, got.Env)
	}
	ta := got.TokenAttributes
	if ta == nil || ta.ServiceAccountTokenAudience != "sts.example.com" || ta.CacheType != kubeletconfigv1.ServiceAccountServiceAccountTokenCacheType ||
		ta.RequireServiceAccount == nil || !*ta.RequireServiceAccount || !slices.Equal(ta.RequiredServiceAccountAnnotationKeys, []string{"example.com/role"}) {
		t.Errorf("tokenAttributes = %+v", ta)
	}
}

// binDir of the syncer: the flag points at a read-only mount of the chosen source.
func TestCredentialProvidersBinDir(t *testing.T) {
	evaluator, err := psapolicy.NewEvaluator(psapolicy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	violations := func(level psaapi.Level, d *appsv1.Deployment) []string {
		var out []string
		for _, res := range evaluator.EvaluatePod(psaapi.LevelVersion{Level: level, Version: psaapi.LatestVersion()}, &d.Spec.Template.ObjectMeta, &d.Spec.Template.Spec) {
			if !res.Allowed {
				out = append(out, res.ForbiddenReason+": "+res.ForbiddenDetail)
			}
		}
		return out
	}
	binDir := func(t *testing.T, p providerPods) (corev1.VolumeMount, corev1.Volume, string) {
		t.Helper()
		dir, ok := flagValue(p.syncerContainer().Args, binDirFlag)
		if !ok {
			t.Fatalf("no %s in %v", binDirFlag, p.syncerContainer().Args)
		}
		m, v, rel := mountOf(t, p.syncer.Spec.Template.Spec, p.syncerContainer(), dir)
		if !m.ReadOnly {
			t.Errorf("the bin dir %s is writable by the secret-syncer", dir)
		}
		return m, v, rel
	}
	// What every mode shares: a writable /tmp for the plugins, the webhook untouched by binDir.
	common := func(t *testing.T, p providerPods) {
		t.Helper()
		m, v, _ := mountOf(t, p.syncer.Spec.Template.Spec, p.syncerContainer(), "/tmp")
		if m.ReadOnly || v.EmptyDir == nil {
			t.Errorf("/tmp of the secret-syncer: mount %+v, volume %+v, want a writable emptyDir", m, v)
		}
		if w := p.webhook.Spec.Template.Spec; len(w.Volumes) != 2 || len(w.InitContainers) != 0 {
			t.Errorf("webhook volumes %v, init containers %v: want the TLS Secret and the configuration only", w.Volumes, w.InitContainers)
		}
		if f := violations(psaapi.LevelRestricted, p.webhook); len(f) != 0 {
			t.Errorf("the webhook is no longer restricted: %v", f)
		}
	}

	t.Run("hostPath", func(t *testing.T) {
		p := providerDeployments(t, render(t, providerValues(hostPathBinDir)))
		_, v, rel := binDir(t, p)
		if v.HostPath == nil || v.HostPath.Path != "/etc/eks/image-credential-provider" || rel != "" || v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathDirectory {
			t.Errorf("bin dir volume %+v (sub path %q), want the node's directory", v, rel)
		}
		if len(p.syncer.Spec.Template.Spec.InitContainers) != 0 {
			t.Error("init containers with hostPath")
		}
		common(t, p)
		// As documented: a hostPath volume is beyond the baseline level, so beyond restricted.
		if f := violations(psaapi.LevelBaseline, p.syncer); len(f) != 1 || !strings.Contains(f[0], "hostPath") {
			t.Errorf("baseline violations of the syncer with hostPath = %v, want hostPath only", f)
		}
	})

	t.Run("image volume", func(t *testing.T) {
		p := providerDeployments(t, render(t, providerValues(imageVolumeBinDir)))
		_, v, rel := binDir(t, p)
		want := "registry.example.com/plugins:v1@sha256:" + strings.Repeat("a", 64)
		if v.Image == nil || v.Image.Reference != want || v.Image.PullPolicy != corev1.PullIfNotPresent || rel != "bin" {
			t.Errorf("bin dir volume %+v, sub path %q: want image %s, path bin", v, rel, want)
		}
		if len(p.syncer.Spec.Template.Spec.InitContainers) != 0 {
			t.Error("init containers with an image volume")
		}
		common(t, p)
		if f := violations(psaapi.LevelRestricted, p.syncer); len(f) != 0 {
			t.Errorf("the syncer is no longer restricted: %v", f)
		}
		// path / is the image's root; a digest alone is a reference too.
		root := providerValues(map[string]any{"image": map[string]any{"repository": "registry.example.com/plugins", "digest": "sha256:" + strings.Repeat("b", 64), "path": "/", "pullPolicy": "Always"}})
		p = providerDeployments(t, render(t, root))
		_, v, rel = binDir(t, p)
		if v.Image == nil || v.Image.Reference != "registry.example.com/plugins@sha256:"+strings.Repeat("b", 64) || v.Image.PullPolicy != corev1.PullAlways || rel != "" {
			t.Errorf("bin dir volume %+v, sub path %q: want the digest-pinned image's root", v, rel)
		}
	})

	t.Run("init container", func(t *testing.T) {
		p := providerDeployments(t, render(t, providerValues(initContainerBinDir)))
		m, v, rel := binDir(t, p)
		if v.EmptyDir == nil || rel != "" {
			t.Fatalf("bin dir volume %+v, sub path %q: want an emptyDir", v, rel)
		}
		inits := p.syncer.Spec.Template.Spec.InitContainers
		if len(inits) != 1 {
			t.Fatalf("init containers = %v, want the copy", inits)
		}
		ic := inits[0]
		if ic.Image != "registry.example.com/plugins:v1" || ic.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("init container image %s (%s)", ic.Image, ic.ImagePullPolicy)
		}
		// It copies the image's directory into the very volume the syncer runs plugins from.
		if len(ic.Command) != 5 || ic.Command[0] != "cp" || ic.Command[3] != "/plugins/." {
			t.Fatalf("init command = %q, want cp -R -L /plugins/. <dir>", ic.Command)
		}
		dest := ic.Command[4]
		im, iv, irel := mountOf(t, p.syncer.Spec.Template.Spec, ic, path.Clean(dest))
		if iv.Name != v.Name || irel != "" || im.ReadOnly {
			t.Errorf("the init container copies into %s on %+v (volume %s, sub path %q), the syncer runs plugins from volume %s (%s)", dest, im, iv.Name, irel, v.Name, m.MountPath)
		}
		if ic.Args != nil || len(ic.Ports) != 0 {
			t.Errorf("init container args %v ports %v", ic.Args, ic.Ports)
		}
		common(t, p)
		if f := violations(psaapi.LevelRestricted, p.syncer); len(f) != 0 {
			t.Errorf("the syncer is no longer restricted: %v", f)
		}
	})
}

// A ConfigMap the operator manages: mounted under its key, nothing rendered for it.
func TestCredentialProvidersExistingConfigMap(t *testing.T) {
	r := render(t, map[string]any{"credentialProviders": map[string]any{
		"existingConfigMap": "node-providers", "existingConfigMapKey": "providers.json", "binDir": hostPathBinDir,
	}})
	if n := len(r.OfKind("ConfigMap")); n != 0 {
		t.Errorf("%d ConfigMaps rendered", n)
	}
	p := providerDeployments(t, r)
	for _, d := range []*appsv1.Deployment{p.syncer, p.webhook} {
		c := d.Spec.Template.Spec.Containers[0]
		file, ok := flagValue(c.Args, configFlag)
		if !ok {
			t.Fatalf("%s has no %s", d.Name, configFlag)
		}
		_, v, rel := mountOf(t, d.Spec.Template.Spec, c, file)
		if v.ConfigMap == nil || v.ConfigMap.Name != "node-providers" || rel != "providers.json" ||
			!cmp.Equal(v.ConfigMap.Items, []corev1.KeyToPath{{Key: "providers.json", Path: "providers.json"}}) {
			t.Errorf("%s: %s on volume %+v", d.Name, file, v)
		}
		if _, ok := d.Spec.Template.Annotations["kuik.enix.io/credential-providers-checksum"]; ok {
			t.Errorf("%s carries a checksum of a ConfigMap the chart does not render", d.Name)
		}
	}
}

// Token rights for serviceAccountRef entries exist only when asked for, and are exactly those.
func TestCredentialProvidersServiceAccountTokens(t *testing.T) {
	values := providerValues(imageVolumeBinDir)
	values["credentialProviders"].(map[string]any)["serviceAccountTokens"] = map[string]any{"enabled": true}
	r := render(t, values)
	on, onNS := rulesOf(t, r, "kuik-secret-syncer")
	off, offNS := rulesOf(t, render(t, providerValues(imageVolumeBinDir)), "kuik-secret-syncer")
	if allows(off, "create", "", "serviceaccounts/token") || allows(off, "get", "", "serviceaccounts") {
		t.Error("without serviceAccountTokens, the secret-syncer may create tokens or read ServiceAccounts")
	}
	if !allows(on, "create", "", "serviceaccounts/token") || !allows(on, "get", "", "serviceaccounts") {
		t.Error("with serviceAccountTokens, the secret-syncer may not create tokens or read ServiceAccounts")
	}
	// Nothing else: the enabled rules minus the disabled ones are the two token rules.
	var added []string
	for _, rule := range on {
		if !slices.ContainsFunc(off, func(o rbacv1.PolicyRule) bool { return cmp.Equal(o, rule) }) {
			for _, res := range rule.Resources {
				for _, verb := range rule.Verbs {
					added = append(added, verb+" "+rule.APIGroups[0]+"/"+res)
				}
			}
		}
	}
	slices.Sort(added)
	if diff := cmp.Diff([]string{"create /serviceaccounts/token", "get /serviceaccounts"}, added); diff != "" {
		t.Errorf("rights serviceAccountTokens adds (-want +got):\n%s", diff)
	}
	if !cmp.Equal(onNS, offNS) {
		t.Errorf("serviceAccountTokens changes the namespaced rights:\n%s", cmp.Diff(offNS, onNS))
	}
	if r.Find("ClusterRole", "kuik-secret-syncer-service-account-tokens") == nil || r.Find("ClusterRoleBinding", "kuik-secret-syncer-service-account-tokens") == nil {
		t.Error("no ClusterRole and binding named after the release")
	}
	// The rights alone, without a configuration (the syncer's integration tests grant them so),
	// change nothing else.
	alone := render(t, map[string]any{"credentialProviders": map[string]any{"serviceAccountTokens": map[string]any{"enabled": true}}})
	if cluster, _ := rulesOf(t, alone, "kuik-secret-syncer"); !allows(cluster, "create", "", "serviceaccounts/token") {
		t.Error("serviceAccountTokens alone grants no token creation")
	}
	if s := providerDeployments(t, alone).syncer.Spec.Template.Spec; len(s.Volumes) != 0 || len(s.Containers[0].Args) != len(providerDeployments(t, render(t, nil)).syncerContainer().Args) {
		t.Errorf("serviceAccountTokens alone changes the syncer pod: volumes %v, args %v", s.Volumes, s.Containers[0].Args)
	}
}

// The syncer's ServiceAccount can carry the cloud identity its plugins use, without the webhook's.
func TestSyncerServiceAccountAnnotations(t *testing.T) {
	r := render(t, map[string]any{"serviceAccount": map[string]any{
		"annotations":       map[string]any{"team": "platform", "role": "shared"},
		"syncerAnnotations": map[string]any{"eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/kuik", "role": "syncer"},
	}})
	syncer := convert[corev1.ServiceAccount](t, r.Find("ServiceAccount", "kuik-secret-syncer")).Annotations
	webhook := convert[corev1.ServiceAccount](t, r.Find("ServiceAccount", "kuik-webhook")).Annotations
	if diff := cmp.Diff(map[string]string{"team": "platform", "role": "syncer", "eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/kuik"}, syncer); diff != "" {
		t.Errorf("syncer ServiceAccount annotations (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"team": "platform", "role": "shared"}, webhook); diff != "" {
		t.Errorf("webhook ServiceAccount annotations (-want +got):\n%s", diff)
	}
}

// Values that cannot work are refused, by the schema and, where it is skipped, by the templates,
// with a message naming the values to fix.
func TestCredentialProvidersRefused(t *testing.T) {
	cfg := map[string]any{"providers": []any{ecrProvider()}}
	withProvider := func(change func(p map[string]any)) map[string]any {
		p := ecrProvider()
		change(p)
		return map[string]any{"credentialProviders": map[string]any{"config": map[string]any{"providers": []any{p}}, "binDir": hostPathBinDir}}
	}
	for name, tc := range map[string]struct {
		values map[string]any
		// schema and template: what each refusal must name; an empty template means the
		// templates accept it (the schema alone refuses, the syncer would too at start).
		schema, template []string
	}{
		"no plugin source": {
			values:   map[string]any{"credentialProviders": map[string]any{"config": cfg}},
			schema:   []string{"/credentialProviders/binDir/hostPath", "/credentialProviders/binDir/image/repository"},
			template: []string{"credentialProviders.binDir.hostPath", "credentialProviders.binDir.image.repository"},
		},
		"no plugin source for an existing ConfigMap": {
			values:   map[string]any{"credentialProviders": map[string]any{"existingConfigMap": "node-providers"}},
			schema:   []string{"/credentialProviders/binDir/hostPath", "/credentialProviders/binDir/image/repository"},
			template: []string{"credentialProviders.binDir.hostPath", "credentialProviders.binDir.image.repository"},
		},
		"both plugin sources": {
			values:   map[string]any{"credentialProviders": map[string]any{"config": cfg, "binDir": map[string]any{"hostPath": "/opt/plugins", "image": map[string]any{"repository": "r.example.com/p", "tag": "1"}}}},
			schema:   []string{"/credentialProviders/binDir/image/repository"},
			template: []string{"credentialProviders.binDir.hostPath", "credentialProviders.binDir.image.repository", "exclusive"},
		},
		"a plugin source without a configuration": {
			values:   map[string]any{"credentialProviders": map[string]any{"binDir": hostPathBinDir}},
			schema:   []string{"/credentialProviders/binDir/hostPath"},
			template: []string{"credentialProviders.binDir", "credentialProviders.config", "credentialProviders.existingConfigMap"},
		},
		"an inline configuration and an existing ConfigMap": {
			values:   map[string]any{"credentialProviders": map[string]any{"config": cfg, "existingConfigMap": "node-providers", "binDir": hostPathBinDir}},
			schema:   []string{"/credentialProviders"},
			template: []string{"credentialProviders.config", "credentialProviders.existingConfigMap"},
		},
		"an existing ConfigMap without a key": {
			values:   map[string]any{"credentialProviders": map[string]any{"existingConfigMap": "node-providers", "existingConfigMapKey": "", "binDir": hostPathBinDir}},
			template: []string{"credentialProviders.existingConfigMapKey"},
		},
		"an image without tag or digest": {
			values:   providerValues(map[string]any{"image": map[string]any{"repository": "r.example.com/p"}}),
			template: []string{"credentialProviders.binDir.image", "tag", "digest"},
		},
		"an unknown image mode": {
			values:   providerValues(map[string]any{"image": map[string]any{"repository": "r.example.com/p", "tag": "1", "mode": "hostPath"}}),
			schema:   []string{"/credentialProviders/binDir/image/mode"},
			template: []string{"credentialProviders.binDir.image.mode"},
		},
		"a relative image path": {
			values:   providerValues(map[string]any{"image": map[string]any{"repository": "r.example.com/p", "tag": "1", "path": "bin"}}),
			schema:   []string{"/credentialProviders/binDir/image/path"},
			template: []string{"credentialProviders.binDir.image.path"},
		},
		"copying the whole image": {
			values:   providerValues(map[string]any{"image": map[string]any{"repository": "r.example.com/p", "tag": "1", "mode": "initContainer", "path": "/"}}),
			template: []string{"credentialProviders.binDir.image.path", "initContainer"},
		},
		"copying the whole image, spelt otherwise": {
			values:   providerValues(map[string]any{"image": map[string]any{"repository": "r.example.com/p", "tag": "1", "mode": "initContainer", "path": "/plugins/.."}}),
			template: []string{"credentialProviders.binDir.image.path", "initContainer"},
		},
		"a relative hostPath": {
			values: providerValues(map[string]any{"hostPath": "etc/eks"}),
			schema: []string{"/credentialProviders/binDir/hostPath"},
		},
		"a provider without matchImages": {
			values: withProvider(func(p map[string]any) { delete(p, "matchImages") }),
			schema: []string{"/credentialProviders/config/providers/0", "matchImages"},
		},
		"a provider without defaultCacheDuration": {
			values: withProvider(func(p map[string]any) { delete(p, "defaultCacheDuration") }),
			schema: []string{"/credentialProviders/config/providers/0", "defaultCacheDuration"},
		},
		"a provider field the kubelet does not know": {
			values: withProvider(func(p map[string]any) { p["matchImage"] = []any{"x"} }),
			schema: []string{"/credentialProviders/config/providers/0", "matchImage"},
		},
		"a provider name that is a path": {
			values: withProvider(func(p map[string]any) { p["name"] = "../bin/sh" }),
			schema: []string{"/credentialProviders/config/providers/0/name"},
		},
		"an exec API version the kubelet does not speak": {
			values: withProvider(func(p map[string]any) { p["apiVersion"] = "credentialprovider.kubelet.k8s.io/v2" }),
			schema: []string{"/credentialProviders/config/providers/0/apiVersion"},
		},
		"a duration that is not one": {
			values: withProvider(func(p map[string]any) { p["defaultCacheDuration"] = "12 hours" }),
			schema: []string{"/credentialProviders/config/providers/0/defaultCacheDuration"},
		},
		"a configuration of another kind": {
			values: map[string]any{"credentialProviders": map[string]any{"config": map[string]any{"kind": "KubeletConfiguration", "providers": []any{ecrProvider()}}, "binDir": hostPathBinDir}},
			schema: []string{"/credentialProviders/config/kind"},
		},
		"a configuration without providers": {
			values: map[string]any{"credentialProviders": map[string]any{"config": map[string]any{"apiVersion": "kubelet.config.k8s.io/v1"}, "binDir": hostPathBinDir}},
			schema: []string{"/credentialProviders/config", "providers"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			err := renderErr(tc.values)
			if err == nil {
				t.Fatal("rendered, want refused")
			}
			if len(tc.schema) != 0 {
				if !strings.Contains(err.Error(), "schema") {
					t.Errorf("refused, but not by the schema: %v", err)
				}
				for _, want := range tc.schema {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("the schema's refusal does not name %s:\n%v", want, err)
					}
				}
			}
			_, terr := charts.Render(charts.Release{Name: "kuik", Namespace: ns, Values: tc.values, SkipSchemaValidation: true})
			if len(tc.template) == 0 {
				return
			}
			if terr == nil {
				t.Fatal("without the schema, the templates render it")
			}
			for _, want := range tc.template {
				if !strings.Contains(terr.Error(), want) {
					t.Errorf("the templates' refusal does not name %s:\n%v", want, terr)
				}
			}
		})
	}
}

// An image volume needs a Kubernetes that has them; before 1.33 the chart says to copy instead.
func TestCredentialProvidersImageVolumeNeedsKubernetes133(t *testing.T) {
	values := providerValues(imageVolumeBinDir)
	_, err := charts.Render(charts.Release{Name: "kuik", Namespace: ns, Values: values, KubeVersion: "v1.32.4"})
	if err == nil || !strings.Contains(err.Error(), "credentialProviders.binDir.image.mode") || !strings.Contains(err.Error(), "initContainer") {
		t.Errorf("image volume on 1.32: %v, want refused, naming the mode and initContainer", err)
	}
	for _, v := range []string{"v1.33.0", "v1.35.1"} {
		if _, err := charts.Render(charts.Release{Name: "kuik", Namespace: ns, Values: values, KubeVersion: v}); err != nil {
			t.Errorf("image volume on %s: %v", v, err)
		}
	}
	if _, err := charts.Render(charts.Release{Name: "kuik", Namespace: ns, Values: providerValues(initContainerBinDir), KubeVersion: "v1.30.0"}); err != nil {
		t.Errorf("init container on 1.30: %v", err)
	}
}
