// Command faults runs the control-plane faults of the campaign (issue 11, rows 1–3) against a
// local control plane (internal/testenv) and real secret-syncer binaries (built from
// ./cmd/secret-syncer, run as subprocesses with the chart's flags, under the chart's
// ServiceAccount with a real token):
//
//	apiserver-kill  kube-apiserver SIGKILLed in the middle of an Always convergence over N
//	                namespaces and started again on the same etcd: the syncer recovers without
//	                a restart, every Secret ends correct; time to converge after the return.
//	syncer-kill     the syncer SIGKILLed in the middle of the convergence and started again:
//	                every pair converges; apply requests and Secret writes per pair.
//	leader-kill     two replicas with leader election, the leader SIGKILLed: takeover time, only
//	                one replica writes at a time, OnFailure entries kept through their retention
//	                (and the Secret written just before the kill: is it ever decided again?).
//	all             the three, each on a control plane of its own.
//
// It prints its figures against a floor measured in the same run and asserts nothing about
// timings; it exits non-zero when an outcome is wrong (a Secret missing or wrong, a pair
// written more than once, a syncer that had to be restarted, a retained entry lost).
//
//	go run ./hack/faults all            # N=2000
//	go run ./hack/faults -smoke all     # N=50, for CI
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/enix/kuik/internal/benchutil"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/syncer"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/internal/testutil/kuikenv"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

const crns = "kuik-system"

var (
	flagNamespaces = flag.Int("namespaces", 2000, "namespaces of the Always convergence")
	flagOutage     = flag.Duration("outage", 5*time.Second, "apiserver-kill: how long kube-apiserver stays down")
	flagRetention  = flag.Duration("retention", 45*time.Second, "leader-kill: the syncers' --retention (must exceed the takeover, ~15-17s)")
	flagSmoke      = flag.Bool("smoke", false, "small sizes for CI: 50 namespaces, a 3s outage, a 25s retention; the faults run at once")
	flagKeepLogs   = flag.Bool("keep", false, "keep the syncers' logs and the control plane's directory")
)

func main() {
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: go run ./hack/faults [flags] apiserver-kill|syncer-kill|leader-kill|all\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	ctrllog.SetLogger(logr.Discard())
	if *flagSmoke {
		*flagNamespaces, *flagOutage, *flagRetention = 50, 3*time.Second, 25*time.Second
	}
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	faults := map[string]func(context.Context, string, io.Writer) error{
		"apiserver-kill": apiserverKill,
		"syncer-kill":    syncerKill,
		"leader-kill":    leaderKill,
	}
	var run []string
	switch f := flag.Arg(0); f {
	case "all":
		run = []string{"apiserver-kill", "syncer-kill", "leader-kill"}
	default:
		if faults[f] == nil {
			flag.Usage()
			os.Exit(2)
		}
		run = []string{f}
	}
	start := time.Now()
	bin, cleanup, err := buildSyncer(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		os.Exit(1)
	}
	defer cleanup()
	fmt.Printf("secret-syncer built in %s\n", time.Since(start).Round(time.Millisecond))
	// Under -smoke the faults run at once, each on its own control plane, their output
	// printed in order; otherwise one after the other, so that their figures do not mix.
	outs := make([]bytes.Buffer, len(run))
	errs := make([]error, len(run))
	var wg sync.WaitGroup
	for i, f := range run {
		var w io.Writer = os.Stdout
		if *flagSmoke {
			w = &outs[i]
		}
		fn := func() {
			printf(w, "\n== %s (N=%d)\n", f, *flagNamespaces)
			if errs[i] = faults[f](context.Background(), bin, w); errs[i] != nil {
				printf(w, "FAILED %s: %v\n", f, errs[i])
			}
		}
		if *flagSmoke {
			wg.Go(fn)
		} else {
			fn()
		}
	}
	wg.Wait()
	var failed []string
	for i, f := range run {
		_, _ = os.Stdout.Write(outs[i].Bytes())
		if errs[i] != nil {
			failed = append(failed, f)
		}
	}
	fmt.Printf("\ntotal %s\n", time.Since(start).Round(time.Second))
	if len(failed) > 0 {
		cleanup()
		fmt.Fprintf(os.Stderr, "faults: failed: %s\n", strings.Join(failed, ", "))
		os.Exit(1)
	}
}

func buildSyncer(ctx context.Context) (string, func(), error) {
	dir, err := os.MkdirTemp("", "kuik-faults-bin-")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	bin := filepath.Join(dir, "secret-syncer")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/secret-syncer")
	build.Dir = testenv.RepoRoot()
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("building secret-syncer: %w", err)
	}
	return bin, cleanup, nil
}

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

func newEnv(ctx context.Context, bin string, w io.Writer) (*env, error) {
	t0 := time.Now()
	cp, err := testenv.Start(ctx, testenv.Options{CRDs: true})
	if err != nil {
		return nil, err
	}
	e := &env{cp: cp, bin: bin, w: w}
	ok := false
	defer func() {
		if !ok {
			e.stop()
		}
	}()
	admin := cp.Config()
	if e.cs, err = kubernetes.NewForConfig(admin); err != nil {
		return nil, err
	}
	scheme, err := syncer.Scheme()
	if err != nil {
		return nil, err
	}
	if e.cl, err = client.New(admin, client.Options{Scheme: scheme}); err != nil {
		return nil, err
	}
	if _, err := e.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: crns}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	chart, err := kuikenv.Render(crns)
	if err != nil {
		return nil, err
	}
	if e.chartArgs, err = chart.Args(kuikenv.ComponentSyncer); err != nil {
		return nil, err
	}
	sa, err := chart.ServiceAccount(kuikenv.ComponentSyncer)
	if err != nil {
		return nil, err
	}
	if err := testenv.Apply(ctx, admin, chart.Identity(kuikenv.ComponentSyncer)); err != nil {
		return nil, err
	}
	creds := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: crns},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: testutil.DockerConfigJSON(map[string]string{
			"quay.io": "user:password", "registry.a": "a:pw", "registry.b": "b:pw",
		})},
	}
	if _, err := e.cs.CoreV1().Secrets(crns).Create(ctx, creds, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	// A real token of the chart's ServiceAccount, as the kubelet mounts it.
	tr, err := e.cs.CoreV1().ServiceAccounts(crns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(24 * 3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("token of %s/%s: %w", crns, sa, err)
	}
	if e.dir, err = os.MkdirTemp("", "kuik-faults-"); err != nil {
		return nil, err
	}
	e.kubeconfig = filepath.Join(e.dir, "syncer.kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["testenv"] = &clientcmdapi.Cluster{Server: admin.Host, CertificateAuthorityData: cp.CA.PEM}
	kc.AuthInfos[sa] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["testenv"] = &clientcmdapi.Context{Cluster: "testenv", AuthInfo: sa}
	kc.CurrentContext = "testenv"
	if err := clientcmd.WriteToFile(*kc, e.kubeconfig); err != nil {
		return nil, fmt.Errorf("writing the syncer's kubeconfig: %w", err)
	}
	ok = true
	printf(e.w, "control plane ready, chart identity %s/%s applied, in %s\n", crns, sa, time.Since(t0).Round(time.Millisecond))
	return e, nil
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
		_, err := e.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: names[i], Labels: map[string]string{"faults": label}}}, metav1.CreateOptions{})
		return err
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

// checkSecrets reads the Secret of resource name in every namespace and returns the namespaces
// where it is missing or does not hold exactly want (with the first few reasons).
func (e *env) checkSecrets(ctx context.Context, name string, namespaces []string, want map[string]string) (bad []string, err error) {
	secret := routing.PullSecretName(routing.KindImageAlternative, name)
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list, err := e.cs.CoreV1().Secrets("").List(lctx, metav1.ListOptions{FieldSelector: "metadata.name=" + secret})
	if err != nil {
		return nil, fmt.Errorf("listing the Secrets of %s: %w", name, err)
	}
	got := map[string]*corev1.Secret{}
	for i := range list.Items {
		got[list.Items[i].Namespace] = &list.Items[i]
	}
	for _, ns := range namespaces {
		s := got[ns]
		switch {
		case s == nil:
			bad = append(bad, ns+": missing")
		case s.Type != corev1.SecretTypeDockerConfigJson:
			bad = append(bad, ns+": type "+string(s.Type))
		case s.Labels[v1alpha1.LabelManagedBy] != v1alpha1.ManagedBySecretSyncer:
			bad = append(bad, ns+": not labelled managed-by")
		default:
			a, err := authsOf(s)
			if err != nil {
				bad = append(bad, ns+": "+err.Error())
			} else if !equalMaps(a, want) {
				bad = append(bad, fmt.Sprintf("%s: holds %v", ns, a))
			}
		}
	}
	return bad, nil
}

// waitCorrect polls checkSecrets until every Secret is correct; it returns when that was first
// seen.
func (e *env) waitCorrect(ctx context.Context, name string, namespaces []string, want map[string]string, timeout time.Duration) (time.Time, error) {
	var last []string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		bad, err := e.checkSecrets(ctx, name, namespaces, want)
		if err != nil && ctx.Err() != nil {
			return false, nil // the poll's own deadline: keep the last result
		}
		if err != nil {
			if len(last) == 0 || last[0] != err.Error() {
				printf(e.w, "  (%s)\n", err)
			}
			last = []string{err.Error()}
			return false, nil
		}
		last = bad
		return len(bad) == 0, nil
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("%d of %d Secrets of %s not correct after %s (first: %v): %w", len(last), len(namespaces), name, timeout, first(last, 5), err)
	}
	return time.Now(), nil
}

func authsOf(s *corev1.Secret) (map[string]string, error) {
	var doc struct {
		Auths map[string]struct{ Username, Password string } `json:"auths"`
	}
	if err := json.Unmarshal(s.Data[corev1.DockerConfigJsonKey], &doc); err != nil {
		return nil, fmt.Errorf("decoding %s/%s: %w", s.Namespace, s.Name, err)
	}
	out := map[string]string{}
	for k, v := range doc.Auths {
		out[k] = v.Username + ":" + v.Password
	}
	return out, nil
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }

// syncerProc is a secret-syncer subprocess.
type syncerProc struct {
	name    string
	p       *testenv.Process
	metrics int
	log     string
}

// startSyncer runs the secret-syncer binary with the chart's flags (leader election as the
// chart sets it, its retention), the syncer's token kubeconfig and extra flags, and waits until
// its metrics endpoint answers.
func (e *env) startSyncer(ctx context.Context, name string, extra ...string) (*syncerProc, error) {
	ports, err := testenv.FreePorts(2)
	if err != nil {
		return nil, err
	}
	args := []string{
		"--kubeconfig=" + e.kubeconfig,
		"--cluster-resource-namespace=" + e.chartArgs["cluster-resource-namespace"],
		"--leader-elect=" + e.chartArgs["leader-elect"],
		"--retention=" + e.chartArgs["retention"],
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(ports[0]),
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(ports[1]),
		"-v=1",
	}
	args = append(args, extra...)
	s := &syncerProc{name: name, metrics: ports[0], log: filepath.Join(e.dir, name+".log")}
	if s.p, err = testenv.StartProcess(name, exec.Command(e.bin, args...), s.log); err != nil {
		return nil, err
	}
	err = s.p.WaitFor(ctx, 30*time.Second, func(ctx context.Context) error {
		_, err := s.scrape(ctx)
		return err
	})
	if err != nil {
		s.p.Stop()
		return nil, err
	}
	return s, nil
}

// kill sends SIGKILL to the syncer's process group and waits for its exit.
func (s *syncerProc) kill() time.Time {
	_ = syscall.Kill(-s.p.Pid(), syscall.SIGKILL)
	<-s.p.Exited()
	return time.Now()
}

func (s *syncerProc) alive() bool {
	select {
	case <-s.p.Exited():
		return false
	default:
		return true
	}
}

func (s *syncerProc) scrape(ctx context.Context) (map[string]float64, error) {
	return scrapeURL(ctx, fmt.Sprintf("http://127.0.0.1:%d/metrics", s.metrics))
}

// applies is the syncer's count of successful Secret applies (-1 when it does not answer).
func (s *syncerProc) applies(ctx context.Context) float64 {
	m, err := s.scrape(ctx)
	if err != nil {
		return -1
	}
	return m[`kuik_secret_syncer_applies_total{result="success"}`]
}

// leader reports whether the syncer holds the lease, by controller-runtime's metric.
func (s *syncerProc) leader(ctx context.Context) bool {
	m, err := s.scrape(ctx)
	if err != nil {
		return false
	}
	for k, v := range m {
		if strings.HasPrefix(k, "leader_election_master_status") && v == 1 {
			return true
		}
	}
	return false
}

func scrapeURL(ctx context.Context, url string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return parseMetrics(bufio.NewScanner(resp.Body))
}

func parseMetrics(s *bufio.Scanner) (map[string]float64, error) {
	s.Buffer(make([]byte, 64<<10), 1<<20)
	out := map[string]float64{}
	for s.Scan() {
		line := s.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out, s.Err()
}

// secretApplies is the API server's count of apply requests on Secrets (every code), from its
// own metrics: the requests of every syncer process, including one killed since.
func (e *env) secretApplies(ctx context.Context) (float64, error) {
	b, err := e.cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("reading kube-apiserver metrics: %w", err)
	}
	m, err := parseMetrics(bufio.NewScanner(strings.NewReader(string(b))))
	if err != nil {
		return 0, err
	}
	var n float64
	for k, v := range m {
		if strings.HasPrefix(k, "apiserver_request_total{") && strings.Contains(k, `resource="secrets"`) &&
			strings.Contains(k, `verb="APPLY"`) && strings.Contains(k, `subresource=""`) {
			n += v
		}
	}
	return n, nil
}

// writes counts the Secret writes (ADDED, MODIFIED) the API server reports on the syncer's
// Secrets, per namespace/name, from a watch started now.
type writes struct {
	mu     sync.Mutex
	byPair map[string]int
	times  map[string][]time.Time
	total  atomic.Int64
	stop   context.CancelFunc
	broken atomic.Bool
	// resumed counts the watches the API server ended and that were resumed.
	resumed atomic.Int64
}

func (e *env) watchWrites(ctx context.Context) (*writes, error) {
	sel := v1alpha1.LabelManagedBy + "=" + v1alpha1.ManagedBySecretSyncer
	list, err := e.cs.CoreV1().Secrets("").List(ctx, metav1.ListOptions{LabelSelector: sel, Limit: 1})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	ws := &writes{byPair: map[string]int{}, times: map[string][]time.Time{}, stop: cancel}
	rv := list.ResourceVersion
	w, err := e.cs.CoreV1().Secrets("").Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: rv, AllowWatchBookmarks: true})
	if err != nil {
		cancel()
		return nil, err
	}
	go func() {
		// The API server ends a watch now and then (timeout, slow consumer): resume from the
		// last resource version seen, so that no write goes uncounted.
		for {
			for ev := range w.ResultChan() {
				switch ev.Type {
				case watch.Added, watch.Modified, watch.Bookmark:
					s, ok := ev.Object.(*corev1.Secret)
					if !ok {
						continue
					}
					rv = s.ResourceVersion
					if ev.Type == watch.Bookmark {
						continue
					}
					k := s.Namespace + "/" + s.Name
					ws.mu.Lock()
					ws.byPair[k]++
					ws.times[k] = append(ws.times[k], time.Now())
					ws.mu.Unlock()
					ws.total.Add(1)
				case watch.Error:
					ws.broken.Store(true)
				}
			}
			if ctx.Err() != nil {
				return
			}
			ws.resumed.Add(1)
			if w, err = e.cs.CoreV1().Secrets("").Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: rv, AllowWatchBookmarks: true}); err != nil {
				ws.broken.Store(true)
				return
			}
		}
	}()
	return ws, nil
}

// histogram is how many pairs were written 0, 1, 2… times, over the keys given.
func (ws *writes) histogram(keys []string) map[int]int {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	h := map[int]int{}
	for _, k := range keys {
		h[ws.byPair[k]]++
	}
	return h
}

func (ws *writes) count(key string) int {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.byPair[key]
}

func formatHistogram(h map[int]int) string {
	var ks []int
	for k := range h {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	var parts []string
	for _, k := range ks {
		parts = append(parts, fmt.Sprintf("%d pairs written %d×", h[k], k))
	}
	return strings.Join(parts, ", ")
}

func pairKeys(name string, namespaces []string) []string {
	secret := routing.PullSecretName(routing.KindImageAlternative, name)
	keys := make([]string, len(namespaces))
	for i, ns := range namespaces {
		keys[i] = ns + "/" + secret
	}
	return keys
}

// waitApplies waits until the syncer's successful applies reach n.
func waitApplies(ctx context.Context, s *syncerProc, n float64, timeout time.Duration) error {
	return wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if !s.alive() {
			return false, fmt.Errorf("%s exited; log:\n%s", s.name, s.p.LogTail())
		}
		return s.applies(ctx) >= n, nil
	})
}

func since(t0, t time.Time) string { return t.Sub(t0).Round(time.Millisecond).String() }

var errOutcome = errors.New("outcome wrong")

// printf writes to a fault's output; a failed write to stdout or a buffer is not worth a stop.
func printf(w io.Writer, format string, a ...any) { _, _ = fmt.Fprintf(w, format, a...) }
