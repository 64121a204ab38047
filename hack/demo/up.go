package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	kauth "github.com/google/go-containerregistry/pkg/authn/kubernetes"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"helm.sh/helm/v3/pkg/action"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/enix/kuik/charts"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

const (
	releaseNamespace = "kuik-system"
	demoNamespace    = "demo"
	registryUser     = "demo"
	registryPassword = "kuik-demo-password"
	// upstream is where the demo pod's image claims to live: nothing listens on port 1.
	upstream = "localhost:1/demo/hello"
)

func step(format string, args ...any) { fmt.Printf("==> "+format+"\n", args...) }

func up(ctx context.Context, dir string) (err error) {
	if err := down(dir); err != nil {
		return err
	}
	for _, d := range []string{"bin", "certs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return fmt.Errorf("creating %s: %w", d, err)
		}
	}
	defer func() {
		if err != nil {
			fmt.Fprintln(os.Stderr, "demo: failed; logs are in", dir, "— `make demo-down` cleans up")
		}
	}()

	step("building the webhook, the secret-syncer and the demo registry")
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, "bin")+"/", "./cmd/webhook", "./cmd/secret-syncer", "./hack/demo")
	build.Dir, build.Stdout, build.Stderr = testenv.RepoRoot(), os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building: %w", err)
	}

	step("starting etcd, kube-apiserver and kube-controller-manager on 127.0.0.1")
	cp, err := testenv.Start(ctx, testenv.Options{GarbageCollection: true, Dir: filepath.Join(dir, "cluster"), Detached: true})
	if err != nil {
		return err
	}
	// The control plane records its pids in its own folder; down reads the top one.
	if err := moveRecordedPids(cp.Dir, dir); err != nil {
		return err
	}
	admin := cp.Config()
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return err
	}
	c, err := client.New(admin, client.Options{})
	if err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(c.Scheme()); err != nil {
		return err
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: releaseNamespace}}, metav1.CreateOptions{}); err != nil {
		return err
	}

	step("helm install kuik charts/kuik -n %s", releaseNamespace)
	webhookSA, syncerSA, err := helmInstall(ctx, cp.Kubeconfig)
	if err != nil {
		return err
	}

	ports, err := testenv.FreePorts(6)
	if err != nil {
		return err
	}
	webhookPort, webhookHealth, webhookMetrics, syncerHealth, syncerMetrics, registryPort := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5]
	registryHost := "127.0.0.1:" + strconv.Itoa(registryPort)

	step("starting an OCI registry with basic authentication on %s", registryHost)
	if err := testenv.SpawnDetached(dir, "registry", filepath.Join(dir, "bin", "demo"), "registry",
		"--addr", registryHost, "--username", registryUser, "--password", registryPassword); err != nil {
		return err
	}
	if err := waitHTTP(ctx, "http://"+registryHost+"/v2/", http.StatusUnauthorized); err != nil {
		return fmt.Errorf("registry: %w\n%s", err, testenv.LogTail(dir, "registry"))
	}
	image := registryHost + "/demo/hello:v1"
	if err := push(image); err != nil {
		return err
	}

	step("running the webhook and the secret-syncer as the chart's ServiceAccounts")
	pair, err := cp.CA.ServingPair()
	if err != nil {
		return err
	}
	if err := pair.WriteFiles(filepath.Join(dir, "certs"), "tls.crt", "tls.key"); err != nil {
		return err
	}
	if err := pointWebhooksAtLocal(ctx, cs, webhookPort, cp.CA.PEM); err != nil {
		return err
	}
	for _, who := range []struct{ name, sa string }{{"webhook", webhookSA}, {"secret-syncer", syncerSA}} {
		if err := writeImpersonatingKubeconfig(filepath.Join(dir, who.name+".kubeconfig"), admin, releaseNamespace, who.sa); err != nil {
			return err
		}
	}
	if err := testenv.SpawnDetached(dir, "webhook", filepath.Join(dir, "bin", "webhook"),
		"--kubeconfig", filepath.Join(dir, "webhook.kubeconfig"),
		"--cluster-resource-namespace", releaseNamespace,
		"--cert-dir", filepath.Join(dir, "certs"),
		"--webhook-bind-address", "127.0.0.1", "--webhook-port", strconv.Itoa(webhookPort),
		"--metrics-bind-address", "127.0.0.1:"+strconv.Itoa(webhookMetrics),
		"--health-probe-bind-address", "127.0.0.1:"+strconv.Itoa(webhookHealth),
	); err != nil {
		return err
	}
	if err := testenv.SpawnDetached(dir, "secret-syncer", filepath.Join(dir, "bin", "secret-syncer"),
		"--kubeconfig", filepath.Join(dir, "secret-syncer.kubeconfig"),
		"--cluster-resource-namespace", releaseNamespace,
		"--metrics-bind-address", "127.0.0.1:"+strconv.Itoa(syncerMetrics),
		"--health-probe-bind-address", "127.0.0.1:"+strconv.Itoa(syncerHealth),
	); err != nil {
		return err
	}
	for name, port := range map[string]int{"webhook": webhookHealth, "secret-syncer": syncerHealth} {
		if err := waitHTTP(ctx, "http://127.0.0.1:"+strconv.Itoa(port)+"/readyz", http.StatusOK); err != nil {
			return fmt.Errorf("%s never turned ready: %w\n%s", name, err, testenv.LogTail(dir, name))
		}
	}

	step("applying an ImageAlternative: %s is down, %s/demo/hello holds the same images", upstream, registryHost)
	dockerconfig := testutil.DockerConfigJSON(map[string]string{registryHost: registryUser + ":" + registryPassword})
	if _, err := cs.CoreV1().Secrets(releaseNamespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "demo-registry"},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: dockerconfig},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	ia := &v1alpha1.ImageAlternative{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "ImageAlternative"},
		ObjectMeta: metav1.ObjectMeta{Name: "demo-hello"},
		Spec: v1alpha1.ImageAlternativeSpec{
			RewritePolicy: v1alpha1.RewritePolicyOnFailure,
			Alternatives: []v1alpha1.Alternative{
				{Repository: upstream},
				{Repository: registryHost + "/demo/hello", Insecure: true, Auth: &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: "demo-registry"}}},
			},
		},
	}
	if err := c.Create(ctx, ia); err != nil {
		return err
	}
	printYAML(map[string]any{"kind": "ImageAlternative", "metadata": map[string]any{"name": ia.Name}, "spec": ia.Spec})

	step("creating pod %s/hello with image %s:v1", demoNamespace, upstream)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: demoNamespace}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: demoNamespace},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "hello", Image: upstream + ":v1"}}},
	}
	// The webhook learns of the new ImageAlternative from its informer a moment later: wait
	// with dry-run creates until it routes, then create the pod for real.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := cs.CoreV1().Pods(demoNamespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && got.Labels[v1alpha1.LabelRewritten] == "true", nil
	}); err != nil {
		return fmt.Errorf("the webhook never rewrote the pod: %w\n%s", err, testenv.LogTail(dir, "webhook"))
	}
	got, err := cs.CoreV1().Pods(demoNamespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	fmt.Println("The API server admitted it as:")
	printYAML(map[string]any{
		"metadata": map[string]any{"annotations": got.Annotations, "labels": got.Labels},
		"spec":     map[string]any{"containers": []map[string]string{{"name": "hello", "image": got.Spec.Containers[0].Image}}, "imagePullSecrets": got.Spec.ImagePullSecrets},
	})

	secretName := got.Spec.ImagePullSecrets[0].Name
	step("waiting for the secret-syncer to write %s/%s", demoNamespace, secretName)
	var secret *corev1.Secret
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		secret, err = cs.CoreV1().Secrets(demoNamespace).Get(ctx, secretName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && strings.Contains(string(secret.Data[corev1.DockerConfigJsonKey]), registryHost), err
	}); err != nil {
		return fmt.Errorf("no Secret: %w\n%s", err, testenv.LogTail(dir, "secret-syncer"))
	}
	printSecret(secret)

	step("pulling %s as the kubelet would, with the pod's imagePullSecrets", got.Spec.Containers[0].Image)
	digest, err := pullLikeKubelet(ctx, got.Spec.Containers[0].Image, []corev1.Secret{*secret})
	if err != nil {
		return err
	}
	fmt.Println("    with kuik's Secret:", digest)
	var refused *transport.Error
	if _, err := pullLikeKubelet(ctx, got.Spec.Containers[0].Image, nil); !errors.As(err, &refused) || refused.StatusCode != http.StatusUnauthorized {
		return fmt.Errorf("the registry should refuse a pull without kuik's Secret with 401, got %w", err)
	}
	fmt.Println("    without it:         401 Unauthorized")

	assets, err := testenv.AssetsDir()
	if err != nil {
		return err
	}
	fmt.Printf(`
kuik is running. Explore:

  export KUBECONFIG=%s
  alias kubectl=%s
  kubectl get imagealternatives
  kubectl -n %s get pod hello -o yaml
  kubectl -n %s get secret %s -o jsonpath='{.data.\.dockerconfigjson}' | base64 -d
  kubectl get events -A --field-selector reason=PullSecretInjectionFailed
  curl -s http://127.0.0.1:%d/metrics | grep ^kuik_     # webhook metrics
  curl -s http://127.0.0.1:%d/metrics | grep ^kuik_     # secret-syncer metrics
  less %s/webhook.log %s/secret-syncer.log

Stop everything with: make demo-down
`, cp.Kubeconfig, filepath.Join(assets, "kubectl"), demoNamespace, demoNamespace, secretName, webhookMetrics, syncerMetrics, dir, dir)
	return nil
}

func moveRecordedPids(from, to string) error {
	b, err := os.ReadFile(filepath.Join(from, "pids"))
	if err != nil {
		return fmt.Errorf("reading control-plane pids: %w", err)
	}
	if err := testenv.AppendPids(to, strings.Fields(string(b))...); err != nil {
		return err
	}
	return os.Remove(filepath.Join(from, "pids"))
}

func helmInstall(ctx context.Context, kubeconfig string) (webhookSA, syncerSA string, err error) {
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &kubeconfig
	ns := releaseNamespace
	flags.Namespace = &ns
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, releaseNamespace, "secret", func(string, ...any) {}); err != nil {
		return "", "", fmt.Errorf("helm: %w", err)
	}
	chart, err := charts.Load()
	if err != nil {
		return "", "", err
	}
	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace, install.Timeout = "kuik", releaseNamespace, 2*time.Minute
	rel, err := install.RunWithContext(ctx, chart, nil)
	if err != nil {
		return "", "", fmt.Errorf("helm install: %w", err)
	}
	objs, err := charts.Decode([]byte(rel.Manifest))
	if err != nil {
		return "", "", err
	}
	for _, o := range objs {
		if o.GetKind() != "ServiceAccount" {
			continue
		}
		switch o.GetLabels()["app.kubernetes.io/component"] {
		case "webhook":
			webhookSA = o.GetName()
		case "secret-syncer", "syncer":
			syncerSA = o.GetName()
		}
	}
	if webhookSA == "" || syncerSA == "" {
		return "", "", errors.New("the chart rendered no webhook or syncer ServiceAccount")
	}
	fmt.Printf("    release %s installed: CRDs, RBAC, webhook configurations, ValidatingAdmissionPolicy\n", rel.Name)
	return webhookSA, syncerSA, nil
}

// pointWebhooksAtLocal sends the chart's webhook configurations to the local webhook process
// instead of its in-cluster Service, which no kubelet or kube-proxy serves here.
func pointWebhooksAtLocal(ctx context.Context, cs kubernetes.Interface, port int, ca []byte) error {
	mutating, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=kuik"})
	if err != nil {
		return err
	}
	for i := range mutating.Items {
		m := &mutating.Items[i]
		for j := range m.Webhooks {
			local(&m.Webhooks[j].ClientConfig, port, ca)
		}
		if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, m, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	validating, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=kuik"})
	if err != nil {
		return err
	}
	for i := range validating.Items {
		v := &validating.Items[i]
		for j := range v.Webhooks {
			local(&v.Webhooks[j].ClientConfig, port, ca)
		}
		if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, v, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	if len(mutating.Items) == 0 || len(validating.Items) == 0 {
		return errors.New("the chart installed no webhook configuration")
	}
	return nil
}

func local(cc *admissionregistrationv1.WebhookClientConfig, port int, ca []byte) {
	path := "/"
	if cc.Service != nil && cc.Service.Path != nil {
		path = *cc.Service.Path
	}
	url := "https://127.0.0.1:" + strconv.Itoa(port) + path
	cc.Service, cc.URL, cc.CABundle = nil, &url, ca
}

func writeImpersonatingKubeconfig(path string, admin *rest.Config, namespace, sa string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["demo"] = &clientcmdapi.Cluster{Server: admin.Host, CertificateAuthorityData: admin.CAData}
	cfg.AuthInfos["sa"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: admin.CertData, ClientKeyData: admin.KeyData,
		Impersonate:       "system:serviceaccount:" + namespace + ":" + sa,
		ImpersonateGroups: []string{"system:authenticated", "system:serviceaccounts", "system:serviceaccounts:" + namespace},
	}
	cfg.Contexts["demo"] = &clientcmdapi.Context{Cluster: "demo", AuthInfo: "sa", Namespace: namespace}
	cfg.CurrentContext = "demo"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func push(image string) error {
	ref, err := name.ParseReference(image)
	if err != nil {
		return err
	}
	img, err := random.Image(512, 1)
	if err != nil {
		return err
	}
	auth := authn.FromConfig(authn.AuthConfig{Username: registryUser, Password: registryPassword})
	if err := remote.Write(ref, img, remote.WithAuth(auth)); err != nil {
		return fmt.Errorf("pushing %s: %w", image, err)
	}
	return nil
}

// pullLikeKubelet resolves the image's credential from pull Secrets with the kubelet's keyring
// rules and fetches its manifest.
func pullLikeKubelet(ctx context.Context, image string, secrets []corev1.Secret) (string, error) {
	kc, err := kauth.NewFromPullSecrets(ctx, secrets)
	if err != nil {
		return "", fmt.Errorf("keychain: %w", err)
	}
	ref, err := name.ParseReference(image, name.Insecure)
	if err != nil {
		return "", err
	}
	desc, err := remote.Get(ref, remote.WithContext(ctx), remote.WithAuthFromKeychain(kc))
	if err != nil {
		return "", fmt.Errorf("pulling %s with the pod's pull secrets: %w", image, err)
	}
	return desc.Digest.String(), nil
}

func waitHTTP(ctx context.Context, url string, status int) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == status, nil
	})
}

func printYAML(v any) {
	b, err := yaml.Marshal(v)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		fmt.Println("    " + line)
	}
}

// printSecret shows the injected Secret with its passwords masked.
func printSecret(s *corev1.Secret) {
	var cfg struct {
		Auths map[string]map[string]string `json:"auths"`
	}
	_ = json.Unmarshal(s.Data[corev1.DockerConfigJsonKey], &cfg)
	for _, e := range cfg.Auths {
		for k := range e {
			if k == "password" || k == "auth" {
				e[k] = "***"
			}
		}
	}
	printYAML(map[string]any{
		"metadata": map[string]any{"name": s.Name, "namespace": s.Namespace, "labels": s.Labels, "ownerReferences": s.OwnerReferences},
		"type":     s.Type,
		"data":     map[string]any{".dockerconfigjson (decoded, passwords masked)": cfg},
	})
}
