package app

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/enix/kuik/internal/syncer"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

type renderOptions struct {
	resources, secrets, namespaces, pods string
	clusterResourceNamespace, clusterID  string
	providers                            ProviderFlags
	renewFloor                           time.Duration
}

func newRenderCommand() *cobra.Command {
	var o renderOptions
	cmd := &cobra.Command{
		Use:   "render --resources FILE --secrets FILE [--namespaces FILE] [--pods FILE]",
		Short: "Print the Secrets the syncer would apply for the objects in the files",
		Long: `render prints, as a YAML stream sorted by namespace then name, exactly the Secrets the
secret-syncer would apply for the routing resources, Secrets, namespaces and pods in the files
(YAML or JSON, one or more documents, List kinds accepted), and one line on stderr for each
entry left out, naming the resource, the entry and the reason. It runs the syncer's own
decisions from a fresh start: OnFailure Secrets hold what the live rewritten pods use, counting
only the records the webhook could have written (the resource selects the pod and its namespace,
and the container's image is one of its candidates for the recorded original).

Without --namespaces, the namespaces are those of the pods, without labels (so a resource with a
namespaceSelector selects none of them).

With --image-credential-provider-config and --image-credential-provider-bin-dir, render runs the
plugins once for every provider entry, as a fresh syncer would, and prints the kuik-provider-*
Secrets too; an entry whose provider takes a service-account token is left out (render requests
no token).`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.resources, "resources", "", "file of ImageAlternatives and ImageMirrors")
	f.StringVar(&o.secrets, "secrets", "", "file of the Secrets of the cluster resource namespace")
	f.StringVar(&o.namespaces, "namespaces", "", "file of Namespaces")
	f.StringVar(&o.pods, "pods", "", "file of Pods as the webhook admitted them")
	f.StringVar(&o.clusterResourceNamespace, "cluster-resource-namespace", defaultNamespace(),
		"namespace of the secretRef Secrets; Secrets of other namespaces in --secrets are ignored")
	f.StringVar(&o.clusterID, "cluster-id", "",
		`as the syncer's: a pod's record of a mirror counts only with this cluster's tag ("-kuik-<id>" suffix)`)
	o.providers.bind(f)
	f.DurationVar(&o.renewFloor, "provider-renew-floor", time.Minute, "as the syncer's: the lifetime recorded for a credential the plugin asks not to cache is twice that")
	_ = cmd.MarkFlagRequired("resources")
	_ = cmd.MarkFlagRequired("secrets")
	return cmd
}

func (o *renderOptions) run(ctx context.Context, stdout, stderr io.Writer) error {
	if err := o.providers.validate(); err != nil {
		return err
	}
	if err := validateClusterID(o.clusterID); err != nil {
		return err
	}
	plugins, err := o.providers.Plugins()
	if err != nil {
		return err
	}
	scheme, err := syncer.Scheme()
	if err != nil {
		return err
	}
	decoder := serializer.NewCodecFactory(scheme).UniversalDeserializer()
	var w syncer.World

	objs, err := readObjects(o.resources, decoder)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		var (
			r   *syncer.Resource
			err error
		)
		switch t := obj.(type) {
		case *v1alpha1.ImageAlternative:
			r, err = syncer.FromImageAlternative(t)
		case *v1alpha1.ImageMirror:
			r, err = syncer.FromImageMirror(t, o.clusterID)
		default:
			return fmt.Errorf("%s: %T is not a routing resource", o.resources, obj)
		}
		if err != nil {
			_, _ = fmt.Fprintln(stderr, err.Error())
			continue
		}
		w.Resources = append(w.Resources, r)
	}

	objs, err = readObjects(o.secrets, decoder)
	if err != nil {
		return err
	}
	w.Secrets = map[string]*corev1.Secret{}
	for _, obj := range objs {
		s, ok := obj.(*corev1.Secret)
		if !ok {
			return fmt.Errorf("%s: %T is not a Secret", o.secrets, obj)
		}
		if s.Namespace != "" && s.Namespace != o.clusterResourceNamespace {
			continue
		}
		// What the API server does on write, for files written by hand.
		for k, v := range s.StringData {
			if s.Data == nil {
				s.Data = map[string][]byte{}
			}
			s.Data[k] = []byte(v)
		}
		s.StringData = nil
		w.Secrets[s.Name] = s
	}

	if o.namespaces != "" {
		objs, err = readObjects(o.namespaces, decoder)
		if err != nil {
			return err
		}
		w.Namespaces = map[string]labels.Set{}
		for _, obj := range objs {
			ns, ok := obj.(*corev1.Namespace)
			if !ok {
				return fmt.Errorf("%s: %T is not a Namespace", o.namespaces, obj)
			}
			if ns.DeletionTimestamp == nil {
				w.Namespaces[ns.Name] = ns.Labels
			}
		}
	}

	if o.pods != "" {
		objs, err = readObjects(o.pods, decoder)
		if err != nil {
			return err
		}
		for _, obj := range objs {
			p, ok := obj.(*corev1.Pod)
			if !ok {
				return fmt.Errorf("%s: %T is not a Pod", o.pods, obj)
			}
			// The syncer watches the rewritten pods only.
			if p.Labels[v1alpha1.LabelRewritten] != "true" {
				continue
			}
			if w.Namespaces != nil {
				if _, ok := w.Namespaces[p.Namespace]; !ok {
					continue
				}
			}
			w.Pods = append(w.Pods, syncer.PodFromObject(p))
		}
	}

	var providerSecrets []*corev1.Secret
	if plugins != nil {
		w.Providers, providerSecrets, err = syncer.RenderProviders(ctx, plugins, w.Resources, o.clusterResourceNamespace, o.renewFloor)
		if err != nil {
			return err
		}
	}
	secrets, leftOut, err := syncer.Render(w)
	if err != nil {
		return err
	}
	secrets = append(providerSecrets, secrets...)
	slices.SortStableFunc(secrets, func(a, b *corev1.Secret) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	for _, l := range leftOut {
		_, _ = fmt.Fprintln(stderr, l.String())
	}
	out := bufio.NewWriter(stdout)
	for _, s := range secrets {
		b, err := secretYAML(s)
		if err != nil {
			return err
		}
		_, _ = fmt.Fprintln(out, "---") // a write error surfaces at Flush
		_, _ = out.Write(b)
	}
	if err := out.Flush(); err != nil {
		return fmt.Errorf("writing output: %w", err)
	}
	return nil
}

// secretYAML prints a Secret without the empty fields Go's zero values would add.
func secretYAML(s *corev1.Secret) ([]byte, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("encoding secret: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("encoding secret: %w", err)
	}
	if md, ok := m["metadata"].(map[string]any); ok {
		delete(md, "creationTimestamp")
	}
	out, err := yaml.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encoding secret: %w", err)
	}
	return out, nil
}

// readObjects decodes every document of a YAML or JSON stream, expanding List kinds.
func readObjects(path string, decoder runtime.Decoder) ([]runtime.Object, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading objects: %w", err)
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var out []runtime.Object
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		items := []unstructured.Unstructured{u}
		if u.IsList() {
			list, err := u.ToList()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			items = list.Items
		}
		for i := range items {
			raw, err := items[i].MarshalJSON()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			obj, _, err := decoder.Decode(raw, nil, nil)
			if err != nil {
				return nil, fmt.Errorf("%s: %s %q: %w", path, items[i].GetKind(), items[i].GetName(), err)
			}
			out = append(out, obj)
		}
	}
}
