package testutil

import (
	"net/http"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func TestFrontLogsRequestsAndBytes(t *testing.T) {
	reg := NewRegistry(t, "u", "p")
	front := NewFront(t, reg)
	img, err := random.Image(4096, 2)
	if err != nil {
		t.Fatal(err)
	}
	// A body shorter than the stall threshold goes through.
	front.StallUploads(1 << 20)
	ref, _ := name.ParseReference(front.Host + "/lib/app:v1")
	auth := remote.WithAuth(authn.FromConfig(authn.AuthConfig{Username: "u", Password: "p"}))
	if err := remote.Write(ref, img, auth); err != nil {
		t.Fatal(err)
	}
	if front.Stalled() != 0 {
		t.Fatal("a short upload stalled")
	}
	if got := front.Count(http.MethodPut, KindManifest); got != 1 {
		t.Fatalf("%d manifest PUTs, want 1", got)
	}
	if got := front.UploadedBytes(); got < 2*4096 {
		t.Fatalf("%d bytes uploaded, want at least the 2 layers", got)
	}
	front.Reset()
	if _, err := remote.Image(ref, auth); err != nil {
		t.Fatal(err)
	}
	if got := front.Count(http.MethodGet, KindManifest); got != 1 {
		t.Fatalf("%d manifest GETs, want 1", got)
	}
	if front.DownloadedBytes() != 0 {
		t.Fatal("reading a manifest counted blob bytes")
	}
}
