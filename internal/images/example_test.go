package images_test

import (
	"context"
	"fmt"
	"runtime"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/enix/kuik/internal/images"
)

// Build the images for the local node's platform only, keeping binaries and layers in a cache
// directory so that an unchanged tree rebuilds in seconds, and push them to a test registry.
func Example() {
	ctx := context.Background()
	src, err := images.GitSource(ctx, ".")
	if err != nil {
		panic(err)
	}
	imgs, err := images.Build(ctx, images.Options{
		Platforms: []v1.Platform{{OS: "linux", Architecture: runtime.GOARCH}},
		BinDir:    "/path/to/cache/kuik-images",
		Source:    src,
	})
	if err != nil {
		panic(err)
	}
	refs, err := images.Push(ctx, imgs, images.PushOptions{
		Prefix: "127.0.0.1:5000/kuik",
		Tag:    "dev",
		Remote: []remote.Option{remote.WithAuth(&authn.Basic{Username: "pusher", Password: "secret"})},
	})
	if err != nil {
		panic(err)
	}
	for _, r := range refs {
		fmt.Println(r) // 127.0.0.1:5000/kuik/kuik-webhook@sha256:…, then kuik-secret-syncer and kuik-keeper
	}
}
