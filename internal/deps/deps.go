//go:build deps

// Package deps keeps the product's dependencies pinned in go.mod while the packages that use
// them are being written. It is never built.
package deps

import (
	_ "github.com/bmatcuk/doublestar/v4"
	_ "github.com/distribution/reference"
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/google/go-containerregistry/pkg/registry"
	_ "github.com/google/go-containerregistry/pkg/v1/remote"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/spf13/cobra"
	_ "golang.org/x/sync/singleflight"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/kubelet/config/v1"
	_ "sigs.k8s.io/controller-runtime"
	_ "sigs.k8s.io/controller-runtime/pkg/envtest"
	_ "sigs.k8s.io/yaml"
)
