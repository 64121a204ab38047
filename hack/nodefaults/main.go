// Command nodefaults runs three fault rows of the campaign (issues 11 and 19) on a real node
// (internal/testnode: kubelet, containerd, kube-proxy, the whole control plane), with kuik
// installed by its chart with its defaults (internal/kuiknode: 2 webhook replicas behind their
// Service, failurePolicy Ignore, probe timeout 2s, cache TTL 10s):
//
//   - row 4: one of the two webhook replicas is killed while a Deployment of -replicas pods rolls
//     out and its upstream is down (an OnFailure ImageAlternative routes to a private mirror).
//     It counts the pods the API server admitted unrouted (its call hit the dead replica and
//     failurePolicy Ignore let the pod through unchanged), stuck in ImagePullBackOff and
//     Running; checks that the stuck ones do not recover by themselves; then does what an
//     operator does (deletes them: the ReplicaSet creates them again, through the webhook) and
//     checks that every pod runs.
//   - row 5: the upstream registry flaps (its listener is closed and opened again every -flap)
//     during a Deployment's creation and then its rolling update: every pod must end Running on
//     a candidate (the upstream or the mirror), and the webhooks' probes (kuik_registry_probes_total
//     scraped from both replicas) must stay within what the probe cache and the collapsing of
//     identical concurrent probes allow: per replica and candidate, one probe per TTL window of
//     the rollout, whatever the number of admissions.
//   - row 6: the upstream hangs (accepts connections, never answers) while a Deployment of
//     -replicas pods rolls out on cold webhooks: every pod must end Running on the mirror, none
//     admitted unrouted, and no more admissions over 1 s than webhook replicas (each may wait
//     for the probe timeout once, before its own hint or the secret-syncer leader's shared hint
//     exists; kuik_webhook_admission_duration_seconds scraped from both replicas). Once the
//     leader has written the upstream to the ImageAlternative's status.unavailable, the webhook
//     Deployment is restarted (-restart-webhooks: its new replicas hold only the shared hint)
//     and the Deployment's rolling update must have no admission over 1 s.
//
// It needs root (it starts its own node in namespaces of its own and removes it at the end),
// the binaries of hack/controlplane.sh and hack/node.sh. It prints figures; it exits 1 when an
// outcome is wrong (a pod not running where it should, probes or slow admissions beyond the
// bound, a webhook replica that did not come back).
//
//	go run ./hack/nodefaults                 # the campaign: 50 replicas
//	go run ./hack/nodefaults -replicas 5     # smoke
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/enix/kuik/internal/benchutil"
	"github.com/enix/kuik/internal/kuiknode"
	"github.com/enix/kuik/internal/testnode"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/internal/webhook"
)

var (
	flagReplicas   = flag.Int("replicas", 50, "pods of each rollout")
	flagRows       = flag.String("rows", "4,5,6", "rows to run (comma-separated: 4, 5, 6)")
	flagKill       = flag.String("kill", "sigkill", "how row 4 kills a webhook replica: sigkill (its container's process, through containerd) or delete (the pod, grace period 0)")
	flagKillAfter  = flag.Int("kill-after", 0, "row 4 kills the replica once this many pods are admitted (0: replicas/5, at least 1)")
	flagObserve    = flag.Duration("observe", 30*time.Second, "row 4: how long the stuck pods are watched for a recovery of their own")
	flagFlap       = flag.Duration("flap", time.Second, "row 5: the upstream is up for this long, then down for this long, and so on")
	flagVictim     = flag.String("victim", "busy", "row 4: which webhook replica is killed: busy (the one the API server's connection goes to, found by dry runs) or idle (the other)")
	flagPullPolicy = flag.String("pull-policy", string(corev1.PullIfNotPresent), "row 5: imagePullPolicy of the pods (Always: every pod's pull meets the flapping registry, and the kubelet's back-off makes the tail minutes long)")
	flagRestart    = flag.Bool("restart-webhooks", true, "row 6: restart the webhook Deployment before the rolling update, so that its replicas hold no hint of their own and only the leader's shared hint covers them (false: the same replicas, with their own hints)")
	flagPolicy     = flag.String("failure-policy", "", "the pod webhook's failurePolicy (chart value webhook.mutating.failurePolicy; empty: the chart's default, Ignore)")
	flagTimeout    = flag.Duration("timeout", 6*time.Minute, "bound of each wait for the kubelet")
)

// The private mirror's only credential, and the secretRef Secret (release namespace) holding it.
const (
	mirrorUser     = "puller"
	mirrorPassword = "s3cret"
	mirrorSecret   = "mirror"
)

// env is what the rows share: the node, kuik on it, the mirror.
type env struct {
	n      *testnode.Node
	cs     kubernetes.Interface
	c      client.Client
	kuik   *kuiknode.Kuik
	mirror *testutil.Registry
}

func main() {
	flag.Parse()
	ctrllog.SetLogger(logr.Discard())
	os.Exit(testnode.Main(testnode.Options{}, func(ctx context.Context, n *testnode.Node) int {
		if err := run(ctx, n); err != nil {
			fmt.Printf("\nnodefaults: FAILED: %v\n", err)
			return 1
		}
		fmt.Println("\nnodefaults: every outcome as expected")
		return 0
	}))
}

func run(ctx context.Context, n *testnode.Node) error {
	t0 := time.Now()
	e := &env{n: n}
	var err error
	if e.cs, err = kubernetes.NewForConfig(n.Config()); err != nil {
		return err
	}
	if e.c, err = client.New(n.Config(), client.Options{Scheme: webhook.Scheme()}); err != nil {
		return err
	}
	// The registries live as long as the program: their cleanups are never run.
	tb := &benchutil.TB{}
	images := testutil.NewRegistryAt(tb, testnode.NodeIP+":0", "", "")
	if err := n.TrustPlainHTTP(images.Host); err != nil {
		return err
	}
	e.mirror = testutil.NewRegistryAt(tb, testnode.NodeIP+":0", mirrorUser, mirrorPassword)
	if err := n.TrustPlainHTTP(e.mirror.Host); err != nil {
		return err
	}
	var values map[string]any
	if *flagPolicy != "" {
		values = map[string]any{"webhook": map[string]any{"mutating": map[string]any{"failurePolicy": *flagPolicy}}}
	}
	if e.kuik, err = kuiknode.Install(ctx, n, kuiknode.Options{Registry: images.Host, Values: values}); err != nil {
		return err
	}
	for _, tm := range e.kuik.Timings {
		fmt.Printf("kuik install: %-32s %6.2fs\n", tm.Name, tm.Since.Seconds())
	}
	if _, err := e.cs.CoreV1().Secrets(e.kuik.Namespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: mirrorSecret},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: testutil.DockerConfigJSON(map[string]string{e.mirror.Host: mirrorUser + ":" + mirrorPassword})},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	policy := "Ignore (chart default)"
	if *flagPolicy != "" {
		policy = *flagPolicy + " (-failure-policy)"
	}
	fmt.Printf("node and kuik ready in %s (chart defaults: webhook.replicaCount 2, probe timeout 2s, cacheTTL 10s, hinted wait 200ms, availability checks every 30s; mutating failurePolicy %s)\n", time.Since(t0).Round(time.Millisecond), policy)

	var failures []string
	for _, row := range strings.Split(*flagRows, ",") {
		var err error
		switch strings.TrimSpace(row) {
		case "4":
			err = e.row4(ctx)
		case "5":
			err = e.row5(ctx)
		case "6":
			err = e.row6(ctx)
		default:
			err = fmt.Errorf("unknown row %q", row)
		}
		if err != nil {
			failures = append(failures, fmt.Sprintf("row %s: %v", row, err))
			fmt.Printf("row %s: FAILED: %v\n", row, err)
		}
	}
	fmt.Printf("\ntotal %s\n", time.Since(t0).Round(time.Second))
	if len(failures) > 0 {
		return fmt.Errorf("%s", strings.Join(failures, "; "))
	}
	return nil
}
