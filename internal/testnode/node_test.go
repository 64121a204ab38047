package testnode_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testnode"
	"github.com/enix/kuik/internal/testutil"
)

var node *testnode.Node

func TestMain(m *testing.M) { os.Exit(testnode.Run(m, testnode.Options{}, &node)) }

const (
	registryUser     = "puller"
	registryPassword = "s3cret"
)

func pod(name, image string, pullSecrets ...string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name:            "main",
				Image:           image,
				ImagePullPolicy: corev1.PullAlways,
				Command:         []string{"/guest", "pause"},
			}},
		},
	}
	for _, s := range pullSecrets {
		p.Spec.ImagePullSecrets = append(p.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: s})
	}
	return p
}

func create(t *testing.T, cs kubernetes.Interface, ns string, p *corev1.Pod) time.Time {
	t.Helper()
	start := time.Now()
	if _, err := cs.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return start
}

// pullSecret creates a kubernetes.io/dockerconfigjson Secret for the registry.
func pullSecret(t *testing.T, cs kubernetes.Interface, ns, name string, r *testutil.Registry, password string) {
	t.Helper()
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: testutil.DockerConfigJSON(map[string]string{r.Host: registryUser + ":" + password})},
	}
	if _, err := cs.CoreV1().Secrets(ns).Create(t.Context(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// events joins the messages of the pod's events with one of these reasons (all when none).
func events(t *testing.T, cs kubernetes.Interface, ns, name string, reasons ...string) string {
	t.Helper()
	list, err := testnode.PodEvents(t.Context(), cs, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, e := range list {
		if len(reasons) == 0 || slices.Contains(reasons, e.Reason) {
			msgs = append(msgs, e.Reason+": "+e.Message)
		}
	}
	return strings.Join(msgs, "\n")
}

func TestNodeIsReadyAtItsAddress(t *testing.T) {
	n := testnode.Require(t, node)
	got, err := n.Clientset(t).CoreV1().Nodes().Get(t.Context(), n.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ip string
	for _, a := range got.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			ip = a.Address
		}
	}
	if ip != testnode.NodeIP {
		t.Errorf("node InternalIP = %q, want %s", ip, testnode.NodeIP)
	}
	for _, tm := range n.Timings {
		t.Logf("start: %-40s %6.2fs", tm.Name, tm.Since.Seconds())
	}
}

// The kubelet pulls from a registry behind basic authentication with the pod's pull Secret.
func TestPrivateImageWithPullSecretRuns(t *testing.T) {
	n := testnode.Require(t, node)
	cs := n.Clientset(t)
	ns := n.Namespace(t)
	reg := n.Registry(t, registryUser, registryPassword)
	image := n.PushGuest(t, reg, "private/guest:with-secret")
	pullSecret(t, cs, ns, "registry", reg, registryPassword)

	start := create(t, cs, ns, pod("private", image, "registry"))
	got, err := testnode.WaitPod(t.Context(), cs, ns, "private", 90*time.Second, testnode.PodRunning)
	if err != nil {
		t.Fatalf("%v\nevents:\n%s", err, events(t, cs, ns, "private"))
	}
	t.Logf("pod Running and ready %.2fs after its creation (image pulled with credentials)", time.Since(start).Seconds())
	if got.Status.ContainerStatuses[0].ImageID == "" {
		t.Errorf("no imageID in the running container's status: %+v", got.Status.ContainerStatuses[0])
	}
	if reg.ManifestRequests() == 0 {
		t.Error("the registry served no manifest: the image did not come from it")
	}
}

// Without the Secret, or with a wrong password, the registry's 401 stops the pull.
func TestPrivateImageWithoutValidSecretIsRefused(t *testing.T) {
	n := testnode.Require(t, node)
	cs := n.Clientset(t)
	ns := n.Namespace(t)
	reg := n.Registry(t, registryUser, registryPassword)
	image := n.PushGuest(t, reg, "private/guest:refused")
	pullSecret(t, cs, ns, "wrong", reg, "not-the-password")

	for name, tc := range map[string]struct {
		secrets []string
		// What containerd reports: without credentials it answers the registry's 401 challenge
		// with "no basic auth credentials"; with wrong ones it reports the 401.
		want string
	}{
		"no-secret":      {want: "no basic auth credentials"},
		"wrong-password": {secrets: []string{"wrong"}, want: "401 Unauthorized"},
	} {
		t.Run(name, func(t *testing.T) {
			refused := reg.Unauthorized()
			create(t, cs, ns, pod(name, image, tc.secrets...))
			got, err := testnode.WaitPod(t.Context(), cs, ns, name, 90*time.Second, testnode.ContainerWaiting("ErrImagePull", "ImagePullBackOff"))
			if err != nil {
				t.Fatalf("%v\nevents:\n%s", err, events(t, cs, ns, name))
			}
			// The kubelet's pull errors: the container's waiting message and the Failed events.
			msg := got.Status.ContainerStatuses[0].State.Waiting.Message + "\n" + events(t, cs, ns, name, "Failed")
			if !strings.Contains(msg, tc.want) {
				t.Errorf("the pull failed without %q in the status or events:\n%s", tc.want, msg)
			}
			if reg.Unauthorized() == refused {
				t.Error("the registry refused nothing: the pull failed before reaching it")
			}
			t.Logf("%s: %s", got.Status.ContainerStatuses[0].State.Waiting.Reason, firstLine(msg))
		})
	}
}

// An in-cluster client reaches the API server through the kubernetes Service (kube-proxy),
// authenticated with its service-account token.
func TestPodReachesAPIServerThroughKubernetesService(t *testing.T) {
	n := testnode.Require(t, node)
	cs := n.Clientset(t)
	ns := n.Namespace(t)
	reg := n.Registry(t, "", "")
	p := pod("whoami", n.PushGuest(t, reg, "public/guest:whoami"))
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	p.Spec.Containers[0].Command = []string{"/guest", "whoami"}
	create(t, cs, ns, p)
	if _, err := testnode.WaitPod(t.Context(), cs, ns, "whoami", 90*time.Second, testnode.PodSucceeded); err != nil {
		t.Errorf("%v\nevents:\n%s\nlogs:\n%s", err, events(t, cs, ns, "whoami"), logs(t, cs, ns, "whoami"))
		return
	}
	out := logs(t, cs, ns, "whoami")
	want := "user=system:serviceaccount:" + ns + ":default via https://" + testenv.KubernetesServiceIP + ":443/"
	if !strings.Contains(out, want) {
		t.Errorf("pod's output does not contain %q:\n%s", want, out)
	}
	t.Logf("pod output: %s", strings.TrimSpace(out))
}

func logs(t *testing.T, cs kubernetes.Interface, ns, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	b, err := cs.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		return "(logs: " + err.Error() + ")"
	}
	return string(b)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

const holdEnv = "KUIK_TESTNODE_TEST_HOLD"

// A helper of TestKilledRunIsCleanedByTheNextOne, run in a second test binary: it starts a pod,
// says so, and waits to be killed.
func TestHoldForKill(t *testing.T) {
	if os.Getenv(holdEnv) != "1" {
		t.Skip("helper process of TestKilledRunIsCleanedByTheNextOne")
	}
	n := testnode.Require(t, node)
	cs := n.Clientset(t)
	ns := n.Namespace(t)
	create(t, cs, ns, pod("held", n.PushGuest(t, n.Registry(t, "", ""), "public/guest:held")))
	if _, err := testnode.WaitPod(t.Context(), cs, ns, "held", 90*time.Second, testnode.PodRunning); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintln(os.Stdout, "HOLDING"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Minute)
}

// A test binary killed with SIGKILL while its node runs a pod leaves no process and no mount
// (they die with its namespaces); the next run removes its cgroups and its directory.
func TestKilledRunIsCleanedByTheNextOne(t *testing.T) {
	testnode.Require(t, node)
	tmp := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHoldForKill$", "-test.v", "-test.timeout=5m")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KUIK_TESTNODE_") && !strings.HasPrefix(kv, "TMPDIR=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	// Its own state root, so that this run's cleanup sees only its runs.
	cmd.Env = append(cmd.Env, "TMPDIR="+tmp, holdEnv+"=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Its stdout, line by line, until it says HOLDING; output() once it has exited.
	held := make(chan bool, 1)
	var lines []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			lines = append(lines, s.Text())
			if s.Text() == "HOLDING" {
				held <- true
				return
			}
		}
		held <- false
	}()
	output := func() string { <-done; return strings.Join(lines, "\n") + "\n" + stderr.String() }
	select {
	case ok := <-held:
		if !ok {
			_ = cmd.Wait()
			t.Fatalf("the second test binary ended before its pod ran:\n%s", output())
		}
	case <-time.After(3 * time.Minute):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the second test binary's pod did not run in time:\n%s", output())
	}

	root := filepath.Join(tmp, "kuik-testnode")
	runs, err := filepath.Glob(filepath.Join(root, "run-*"))
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs in %s: %v (%v)", root, runs, err)
	}
	run := runs[0]
	cgroups, err := testnode.RunCgroups(run)
	if err != nil {
		t.Fatal(err)
	}
	if procs := cgroupProcs(cgroups); len(procs) == 0 {
		t.Fatal("no process in the held run's cgroups: its pod is not running, nothing to clean")
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	// Its namespaces go with it (its PID 1 dies of PR_SET_PDEATHSIG, then the kernel kills the
	// rest): soon no process names its directory nor sits in its cgroups.
	var left, inCgroups []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		left, inCgroups = processesNaming(run), cgroupProcs(cgroups)
		if len(left)+len(inCgroups) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(left) > 0 {
		t.Errorf("processes of the killed run still alive: %v", left)
	}
	if len(inCgroups) > 0 {
		t.Errorf("processes still in the killed run's cgroups: %v", inCgroups)
	}
	if m := mountsUnder(t, run); len(m) > 0 {
		t.Errorf("mounts of the killed run still visible: %v", m)
	}

	report := testnode.CleanupStale(root)
	t.Logf("the next run's cleanup: %q", report)
	for _, line := range report {
		if strings.Contains(line, "still alive") || strings.Contains(line, "visible on the host") || strings.Contains(line, "was changed") {
			t.Errorf("the next run found more than cgroups and a directory to clean: %s", line)
		}
	}
	for _, cg := range cgroups {
		if _, err := os.Stat(cg); !os.IsNotExist(err) {
			t.Errorf("cgroup %s of the killed run is still there (stat: %v)", cg, err)
		}
	}
	if _, err := os.Stat(run); !os.IsNotExist(err) {
		t.Errorf("the killed run's directory %s is still there (stat: %v)", run, err)
	}
}

func cgroupProcs(cgroups []string) []string {
	var procs []string
	for _, cg := range cgroups {
		_ = filepath.WalkDir(cg, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Name() == "cgroup.procs" {
				b, _ := os.ReadFile(p)
				procs = append(procs, strings.Fields(string(b))...)
			}
			return nil
		})
	}
	return procs
}

// processesNaming lists the processes whose command line names the run's directory, or the
// short path its namespaces see the node's directory under (/run/kuik-<run>).
func processesNaming(run string) []string {
	var pids []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && (bytes.Contains(b, []byte(run+"/")) || bytes.Contains(b, []byte("/run/kuik-"+filepath.Base(run)+"/"))) {
			pids = append(pids, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return pids
}

func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var under []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir) {
			under = append(under, f[4])
		}
	}
	return under
}
