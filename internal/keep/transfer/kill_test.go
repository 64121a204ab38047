package transfer

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/enix/kuik/internal/testutil"
)

// killChildEnv, set to "<source host> <destination host>", makes the test binary only run the
// copy of TestKilledCopyResumesWithoutReuploading, to be killed by its parent.
const killChildEnv = "KUIK_TRANSFER_KILL_CHILD"

func killOptions() Options {
	return Options{
		SourceAuth: authn.FromConfig(authn.AuthConfig{Username: "src", Password: "pw-src"}),
		DestAuth:   authn.FromConfig(authn.AuthConfig{Username: "dst", Password: "pw-dst"}),
		Jobs:       2,
	}
}

func TestKilledCopyResumesWithoutReuploading(t *testing.T) {
	if hosts := os.Getenv(killChildEnv); hosts != "" {
		srcHost, dstHost, _ := strings.Cut(hosts, " ")
		src, _ := name.ParseReference(srcHost + "/lib/app:v1")
		dst, _ := name.ParseReference(dstHost + "/m/app:v1")
		_, err := Copy(t.Context(), src, dst, killOptions())
		t.Fatalf("the copy returned before the kill: %v", err)
	}

	src, dst := newSide(t, "src"), newSide(t, "dst")
	const layers, size = 6, 2 << 20
	src.index(t, "lib/app", "v1", types.OCIImageIndex, []v1.Descriptor{
		src.image(t, "lib/app", false, layers, size, "amd64"),
		src.image(t, "lib/app", false, layers, size, "arm64"),
	})
	_, want := rawAt(t, src, "lib/app:v1")
	const total = 2 * (1 + layers)

	// Once 3 blobs committed, hold every further upload: the child dies mid-copy.
	var held atomic.Int64
	dst.front.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		if !strings.Contains(r.URL.Path, "/blobs/uploads") || len(committedBlobs(dst.front)) < 3 {
			return false
		}
		held.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
		return true
	})
	var out bytes.Buffer
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledCopyResumesWithoutReuploading$", "-test.count=1")
	cmd.Env = append(os.Environ(), killChildEnv+"="+src.front.Host+" "+dst.front.Host)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for held.Load() == 0 {
		select {
		case err := <-exited:
			t.Fatalf("the child exited before the kill: %v\n%s", err, out.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	if err := <-exited; err == nil {
		t.Fatalf("the child exited cleanly despite SIGKILL:\n%s", out.String())
	}
	dst.front.Intercept(nil)

	committed := committedBlobs(dst.front)
	if len(committed) < 3 || len(committed) >= total {
		t.Fatalf("%d of %d blobs committed before the kill, want some but not all", len(committed), total)
	}
	if _, err := remote.Head(dst.ref(t, "m/app:v1"), remote.WithAuth(dst.auth)); err == nil {
		t.Fatal("the tag exists after a killed copy")
	}

	dst.front.Reset()
	res, err := Copy(t.Context(), src.ref(t, "lib/app:v1"), dst.ref(t, "m/app:v1"), killOptions())
	if err != nil {
		t.Fatal(err)
	}
	if _, got := rawAt(t, dst, "m/app:v1"); got != want || res.Digest != want {
		t.Fatalf("destination %s after the resume, want %s", got, want)
	}
	headed := map[string]bool{}
	for _, r := range dst.front.Requests() {
		if r.Method == http.MethodHead && r.Kind == testutil.KindBlob && r.Status == http.StatusOK {
			headed[r.Path[strings.LastIndex(r.Path, "/")+1:]] = true
		}
	}
	again := committedBlobs(dst.front)
	for d := range committed {
		if !headed[d] {
			t.Errorf("blob %s committed before the kill was not HEADed (200) by the resume", d)
		}
		if again[d] {
			t.Errorf("blob %s committed before the kill was uploaded again", d)
		}
	}
	if n := dst.front.Count(http.MethodPut, testutil.KindUpload); n != total-len(committed) {
		t.Fatalf("the resume PUT %d blobs, want the %d not committed", n, total-len(committed))
	}
	t.Logf("%d of %d blobs committed before SIGKILL; the resume uploaded the other %d", len(committed), total, res.Blobs)
}
