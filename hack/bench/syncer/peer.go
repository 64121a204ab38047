package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/benchutil"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// The peer hook: -peer-cmd 'CMD ARGS' runs CMD through sh -c, on the same API server and the
// same namespaces, with this environment:
//
//	KUBECONFIG                an admin (system:masters) kubeconfig written for the peer
//	PEER_SECRET               the Secret it is expected to write in every namespace (-peer-secret)
//	BENCH_NAMESPACE_SELECTOR  the label selector of those namespaces (bench=always)
//	BENCH_NAMESPACES          how many there are
//	BENCH_SOURCE_SECRET       namespace/name of the dockerconfigjson Secret to copy (kuik-system/creds)
//	KUBECTL                   the control plane's kubectl; its directory is first in PATH
//
// The bench reports the time from the peer's start until PEER_SECRET exists in every namespace,
// then the Secret writes the API server served and the Secret objects that changed (watch
// events) over a quiet window (-peer-quiet) where nothing changes, next to the same figures for
// kuik (a new Always resource reaching the same namespaces) and the floor (a bare client's
// applies; it writes nothing when nothing changes). The peer's process group is ended after its
// window. hack/bench/syncer/peer-kubectl.sh is an example peer.

// tracker follows the Secrets a list selects: which of the wanted namespaces hold one, and how
// many watch events (objects written) arrived since the last reset.
type tracker struct {
	mu      sync.Mutex
	want    map[string]struct{}
	present map[string]struct{}
	all     chan struct{}
	events  atomic.Int64
	stop    context.CancelFunc
	done    chan struct{}
}

func (b *bench) track(ctx context.Context, opts metav1.ListOptions) (*tracker, error) {
	t := &tracker{want: map[string]struct{}{}, present: map[string]struct{}{}, all: make(chan struct{}), done: make(chan struct{})}
	for _, ns := range b.names {
		t.want[ns] = struct{}{}
	}
	ctx, t.stop = context.WithCancel(ctx)
	rv, err := t.list(ctx, b, opts)
	if err != nil {
		t.stop()
		return nil, err
	}
	go func() {
		defer close(t.done)
		for ctx.Err() == nil {
			o := opts
			o.ResourceVersion = rv
			w, err := b.cs.CoreV1().Secrets("").Watch(ctx, o)
			if err == nil {
				for ev := range w.ResultChan() {
					s, ok := ev.Object.(*corev1.Secret)
					if !ok {
						continue
					}
					rv = s.ResourceVersion
					switch ev.Type {
					case watch.Added, watch.Modified:
						t.events.Add(1)
						t.set(s.Namespace, true)
					case watch.Deleted:
						t.events.Add(1)
						t.set(s.Namespace, false)
					}
				}
				w.Stop()
			}
			if ctx.Err() != nil {
				return
			}
			// The watch ended (expired resource version, server timeout): list again.
			time.Sleep(100 * time.Millisecond)
			if r, err := t.list(ctx, b, opts); err == nil {
				rv = r
			}
		}
	}()
	return t, nil
}

func (t *tracker) list(ctx context.Context, b *bench, opts metav1.ListOptions) (string, error) {
	list, err := b.cs.CoreV1().Secrets("").List(ctx, opts)
	if err != nil {
		return "", fmt.Errorf("listing secrets (%s%s): %w", opts.FieldSelector, opts.LabelSelector, err)
	}
	for i := range list.Items {
		t.set(list.Items[i].Namespace, true)
	}
	return list.ResourceVersion, nil
}

func (t *tracker) set(ns string, present bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.want[ns]; !ok {
		return
	}
	if present {
		t.present[ns] = struct{}{}
	} else {
		delete(t.present, ns)
	}
	if len(t.present) == len(t.want) {
		select {
		case <-t.all:
		default:
			close(t.all)
		}
	}
}

func (t *tracker) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.present)
}

func (t *tracker) close() {
	t.stop()
	<-t.done
}

// secretWrites reads the API server's served Secret write requests (apiserver_request_total),
// by verb.
func (b *bench) secretWrites(ctx context.Context) (map[string]float64, error) {
	m, err := benchutil.APIServerMetrics(ctx, b.cs)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for k, v := range m {
		if !strings.HasPrefix(k, "apiserver_request_total{") || !strings.Contains(k, `resource="secrets"`) {
			continue
		}
		i := strings.Index(k, `verb="`)
		if i < 0 {
			continue
		}
		verb, _, _ := strings.Cut(k[i+len(`verb="`):], `"`)
		switch verb {
		case "APPLY", "PATCH", "POST", "PUT", "DELETE", "DELETECOLLECTION":
			out[verb] += v
		}
	}
	return out, nil
}

// quiet counts, over the quiet window, the Secret writes the API server served and the watch
// events of t.
type quietFigures struct {
	requests map[string]float64
	objects  int64
}

func (q quietFigures) String() string {
	var total float64
	verbs := make([]string, 0, len(q.requests))
	for v, c := range q.requests {
		if c > 0 {
			total += c
			verbs = append(verbs, fmt.Sprintf("%s %.0f", v, c))
		}
	}
	sort.Strings(verbs)
	by := ""
	if len(verbs) > 0 {
		by = " (" + strings.Join(verbs, ", ") + ")"
	}
	return fmt.Sprintf("%.0f write requests%s, %d objects written", total, by, q.objects)
}

func (b *bench) quiet(ctx context.Context, t *tracker) (quietFigures, error) {
	before, err := b.secretWrites(ctx)
	if err != nil {
		return quietFigures{}, err
	}
	t.events.Store(0)
	select {
	case <-ctx.Done():
		return quietFigures{}, ctx.Err()
	case <-time.After(*flagPeerQuiet):
	}
	objects := t.events.Load()
	after, err := b.secretWrites(ctx)
	if err != nil {
		return quietFigures{}, err
	}
	for v := range after {
		after[v] -= before[v]
	}
	return quietFigures{requests: after, objects: objects}, nil
}

// peer measures kuik (the in-process syncer, still running), then stops it, then the floor and
// the peer.
func (b *bench) peer(ctx context.Context, kuikApplies *atomic.Int64, stopSyncer context.CancelFunc, syncerDone <-chan error) error {
	n := len(b.names)
	if n == 0 {
		return errors.New("peer: -namespaces 0 leaves no namespace")
	}
	wait := func(t *tracker, what string, exited <-chan struct{}) (time.Duration, error) {
		t0 := time.Now()
		deadline := time.After(*flagPeerTimeout)
		for {
			select {
			case <-t.all:
				return time.Since(t0), nil
			case <-exited:
				// A one-shot peer: give its last writes a moment to show up in the watch.
				exited = nil
				deadline = time.After(10 * time.Second)
			case <-deadline:
				return 0, fmt.Errorf("%s: the Secret is in %d of %d namespaces after %s", what, t.count(), n, time.Since(t0).Round(time.Second))
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
	}

	// kuik: one more Always resource over the same namespaces.
	const compare = "peer-compare"
	kt, err := b.track(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + routing.PullSecretName(routing.KindImageAlternative, compare)})
	if err != nil {
		return err
	}
	res := testutil.NewImageAlternative(compare).Policy(v1alpha1.RewritePolicyAlways).
		NamespaceSelector(map[string]string{"bench": "always"}).
		Repository("quay.io/acme/foo").SecretRef("creds").Build()
	if err := b.cl.Create(ctx, &res); err != nil {
		return err
	}
	kuikTime, err := wait(kt, "kuik", nil)
	kt.close()
	if err != nil {
		return err
	}
	if _, err := b.checkSecrets(ctx, routing.PullSecretName(routing.KindImageAlternative, compare)); err != nil {
		return err
	}
	all, err := b.track(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelManagedBy + "=" + v1alpha1.ManagedBySecretSyncer})
	if err != nil {
		return err
	}
	appliesBefore := kuikApplies.Load()
	kq, err := b.quiet(ctx, all)
	all.close()
	if err != nil {
		return err
	}
	kuikRequests := kuikApplies.Load() - appliesBefore
	if err := b.cl.Delete(ctx, &res); client.IgnoreNotFound(err) != nil {
		return err
	}
	stopSyncer()
	if err := <-syncerDone; err != nil {
		return err
	}

	// The floor: one bare apply per namespace.
	floorTime, err := b.floor(ctx, "bench-floor-peer", 1)
	if err != nil {
		return err
	}

	// The peer.
	name := *flagPeerSecret
	pt, err := b.track(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		return err
	}
	defer pt.close()
	if c := pt.count(); c > 0 {
		return fmt.Errorf("peer: Secret %s already exists in %d namespaces before the peer starts", name, c)
	}
	dir, err := os.MkdirTemp("", "kuik-bench-peer-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	user, err := b.cp.CA.ClientPair("kuik-bench-peer", "system:masters")
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := testenv.WriteKubeconfig(kubeconfig, b.admin.Host, b.cp.CA.PEM, user); err != nil {
		return err
	}
	assets, err := testenv.AssetsDir()
	if err != nil {
		return err
	}
	logPath := filepath.Join(dir, "peer.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command("sh", "-c", *flagPeerCmd)
	cmd.Env = append(os.Environ(),
		"KUBECONFIG="+kubeconfig,
		"PEER_SECRET="+name,
		"BENCH_NAMESPACE_SELECTOR=bench=always",
		"BENCH_NAMESPACES="+strconv.Itoa(n),
		"BENCH_SOURCE_SECRET="+crns+"/creds",
		"KUBECTL="+filepath.Join(assets, "kubectl"),
		"PATH="+assets+string(os.PathListSeparator)+os.Getenv("PATH"),
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the peer: %w", err)
	}
	pid := cmd.Process.Pid
	exited := make(chan struct{})
	var exitErr error
	go func() { exitErr = cmd.Wait(); close(exited) }()
	stopPeer := func() {
		select {
		case <-exited:
			return
		default:
		}
		_ = syscall.Kill(-pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			<-exited
		}
	}
	defer stopPeer()
	peerTime, err := wait(pt, "peer", exited)
	if err != nil {
		_ = logf.Sync()
		state := "still running"
		select {
		case <-exited:
			state = fmt.Sprintf("exited: %v", exitErr)
		default:
		}
		return fmt.Errorf("%w (peer %s)\npeer log:\n%s", err, state, benchutil.Tail(logPath))
	}
	pq, err := b.quiet(ctx, pt)
	if err != nil {
		return err
	}
	stillRunning := true
	select {
	case <-exited:
		stillRunning = false
	default:
	}
	stopPeer()

	fmt.Printf("\n== 4. Against a peer: a Secret in each of %d namespaces, then a quiet window of %s\n", n, *flagPeerQuiet)
	fmt.Printf("peer: %s\n", *flagPeerCmd)
	fmt.Printf("%-6s %12s %8s   %s\n", "", "all present", "ratio", "while nothing changes")
	fmt.Printf("%-6s %12s %7.2fx   %s\n", "floor", floorTime.Round(time.Millisecond), 1.0, "0 write requests, 0 objects written (a bare client writes nothing)")
	fmt.Printf("%-6s %12s %7.2fx   %s (kuik sent %d applies; its forced resync re-applies every pair each %s, see 2.)\n", "kuik", kuikTime.Round(time.Millisecond),
		float64(kuikTime)/float64(floorTime), kq, kuikRequests, *flagResync)
	state := "still running, then stopped"
	if !stillRunning {
		state = fmt.Sprintf("exited by itself: %v", exitErr)
	}
	fmt.Printf("%-6s %12s %7.2fx   %s (peer %s)\n", "peer", peerTime.Round(time.Millisecond),
		float64(peerTime)/float64(floorTime), pq, state)
	return nil
}
