// Package manifest reads Kubernetes objects from YAML or JSON files, for the operator tools
// (`webhook candidates`, `secret-syncer render`) that work on a world described in files.
package manifest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

var codecs = func() serializer.CodecFactory {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return serializer.NewCodecFactory(s, serializer.EnableStrict)
}()

// ReadFiles decodes every document of every file, in order; `List` kinds are flattened.
func ReadFiles(paths ...string) ([]runtime.Object, error) {
	var out []runtime.Object
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, fmt.Errorf("opening %s: %w", p, err)
		}
		objs, err := Read(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		out = append(out, objs...)
	}
	return out, nil
}

// Read decodes a YAML or JSON stream of objects of the core API and kuik.enix.io.
func Read(r io.Reader) ([]runtime.Object, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	decoder := codecs.UniversalDeserializer()
	var out []runtime.Object
	for n := 1; ; n++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading document %d: %w", n, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 || isOnlyComments(doc) {
			continue
		}
		obj, _, err := decoder.Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		if list, ok := obj.(*corev1.List); ok {
			for _, item := range list.Items {
				o, _, err := decoder.Decode(item.Raw, nil, nil)
				if err != nil {
					return nil, fmt.Errorf("document %d: list item: %w", n, err)
				}
				out = append(out, o)
			}
			continue
		}
		out = append(out, obj)
	}
}

func isOnlyComments(doc []byte) bool {
	for _, line := range bytes.Split(doc, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) > 0 && line[0] != '#' {
			return false
		}
	}
	return true
}
