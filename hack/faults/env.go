package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/benchutil"
	"github.com/enix/kuik/internal/syncer"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/internal/testutil/kuikenv"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// env is one control plane with the syncer's chart identity and a secretRef Secret.
type env struct {
	cp         *testenv.ControlPlane
	cs         kubernetes.Interface
	cl         client.Client
	bin        string
	dir        string // syncers' logs and kubeconfig
	kubeconfig string // the syncer's ServiceAccount, with a real token
	chartArgs  map[string]string
	w          io.Writer // the fault's output
}

// newEnv starts a control plane and gives the syncer what the chart gives it: its identity
// (ServiceAccount, RBAC) with a real token, its arguments, and a secretRef Secret.
func newEnv(ctx context.Context, bin string, w io.Writer) (_ *env, err error) {
	t0 := time.Now()
	cp, err := testenv.Start(ctx, testenv.Options{CRDs: true})
	if err != nil {
		return nil, err
	}
	e := &env{cp: cp, bin: bin, w: w}
	defer func() {
		if err != nil {
			e.stop()
		}
	}()
	if err := e.clients(); err != nil {
		return nil, err
	}
	sa, err := e.chartIdentity(ctx)
	if err != nil {
		return nil, err
	}
	if err := e.createCreds(ctx); err != nil {
		return nil, err
	}
	if err := e.writeTokenKubeconfig(ctx, sa); err != nil {
		return nil, err
	}
	printf(e.w, "control plane ready, chart identity %s/%s applied, in %s\n", crns, sa, time.Since(t0).Round(time.Millisecond))
	return e, nil
}

func (e *env) clients() (err error) {
	admin := e.cp.Config()
	if e.cs, err = kubernetes.NewForConfig(admin); err != nil {
		return err
	}
	scheme, err := syncer.Scheme()
	if err != nil {
		return err
	}
	e.cl, err = client.New(admin, client.Options{Scheme: scheme})
	return err
}

// chartIdentity applies the syncer's ServiceAccount and RBAC as the chart renders them, keeps
// the chart's syncer arguments, and returns the ServiceAccount's name.
func (e *env) chartIdentity(ctx context.Context) (string, error) {
	if err := benchutil.CreateNamespace(ctx, e.cs, crns, nil); err != nil {
		return "", err
	}
	chart, err := kuikenv.Render(crns)
	if err != nil {
		return "", err
	}
	if e.chartArgs, err = chart.Args(kuikenv.ComponentSyncer); err != nil {
		return "", err
	}
	sa, err := chart.ServiceAccount(kuikenv.ComponentSyncer)
	if err != nil {
		return "", err
	}
	return sa, testenv.Apply(ctx, e.cp.Config(), chart.Identity(kuikenv.ComponentSyncer))
}

// createCreds creates the secretRef Secret "creds" of the routing resources.
func (e *env) createCreds(ctx context.Context) error {
	creds := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: crns},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: testutil.DockerConfigJSON(map[string]string{
			"quay.io": "user:password", "registry.a": "a:pw", "registry.b": "b:pw",
		})},
	}
	_, err := e.cs.CoreV1().Secrets(crns).Create(ctx, creds, metav1.CreateOptions{})
	return err
}

// writeTokenKubeconfig writes the syncers' kubeconfig: a real token of the chart's
// ServiceAccount sa, as the kubelet mounts it.
func (e *env) writeTokenKubeconfig(ctx context.Context, sa string) (err error) {
	tr, err := e.cs.CoreV1().ServiceAccounts(crns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(24 * 3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token of %s/%s: %w", crns, sa, err)
	}
	if e.dir, err = os.MkdirTemp("", "kuik-faults-"); err != nil {
		return err
	}
	e.kubeconfig = filepath.Join(e.dir, "syncer.kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["testenv"] = &clientcmdapi.Cluster{Server: e.cp.Config().Host, CertificateAuthorityData: e.cp.CA.PEM}
	kc.AuthInfos[sa] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["testenv"] = &clientcmdapi.Context{Cluster: "testenv", AuthInfo: sa}
	kc.CurrentContext = "testenv"
	if err := clientcmd.WriteToFile(*kc, e.kubeconfig); err != nil {
		return fmt.Errorf("writing the syncer's kubeconfig: %w", err)
	}
	return nil
}

func (e *env) stop() {
	e.cp.Stop()
	if e.dir != "" {
		if *flagKeepLogs {
			printf(e.w, "logs kept in %s\n", e.dir)
		} else {
			_ = os.RemoveAll(e.dir)
		}
	}
}

// namespaces creates n namespaces prefix-00000… labelled faults=<label>.
func (e *env) namespaces(ctx context.Context, prefix, label string, n int) ([]string, error) {
	names := make([]string, n)
	t0 := time.Now()
	err := benchutil.Parallel(ctx, n, 16, func(ctx context.Context, i int) error {
		names[i] = fmt.Sprintf("%s-%05d", prefix, i)
		return benchutil.CreateNamespace(ctx, e.cs, names[i], map[string]string{"faults": label})
	})
	if err != nil {
		return nil, fmt.Errorf("creating namespaces: %w", err)
	}
	printf(e.w, "created %d namespaces in %s\n", n, time.Since(t0).Round(time.Millisecond))
	return names, nil
}

// always creates an Always ImageAlternative injecting quay.io's credential of creds for
// quay.io/acme/foo into the namespaces labelled faults=<label>.
func (e *env) always(ctx context.Context, name, label string) error {
	ia := testutil.NewImageAlternative(name).Policy(v1alpha1.RewritePolicyAlways).
		NamespaceSelector(map[string]string{"faults": label}).
		Repository("quay.io/acme/foo").SecretRef("creds").Build()
	return e.cl.Create(ctx, &ia)
}

// alwaysAuths is what every Secret of an always resource must hold.
var alwaysAuths = map[string]string{"quay.io/acme/foo": "user:password"}

// setup starts an env and creates the -namespaces namespaces of the Always convergence.
func setup(ctx context.Context, bin string, w io.Writer) (*env, []string, error) {
	e, err := newEnv(ctx, bin, w)
	if err != nil {
		return nil, nil, err
	}
	names, err := e.namespaces(ctx, "fault", "always", *flagNamespaces)
	if err != nil {
		e.stop()
		return nil, nil, err
	}
	return e, names, nil
}

// floor is the same convergence as the fault's, undisturbed, by the same syncer: an Always
// resource "floor" over names, until every Secret is correct.
func (e *env) floor(ctx context.Context, names []string) (time.Duration, error) {
	t0 := time.Now()
	if err := e.always(ctx, "floor", "always"); err != nil {
		return 0, err
	}
	tFloor, err := e.waitCorrect(ctx, "floor", names, alwaysAuths, 10*time.Minute)
	if err != nil {
		return 0, fmt.Errorf("floor: %w", err)
	}
	return tFloor.Sub(t0), nil
}
