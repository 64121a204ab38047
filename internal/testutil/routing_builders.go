package testutil

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// ImageAlternativeBuilder builds an ImageAlternative; the entry methods (Insecure,
// Unavailable, SecretRef, Provider, Inject) apply to the entry added last.
type ImageAlternativeBuilder struct {
	obj v1alpha1.ImageAlternative
}

// NewImageAlternative starts an ImageAlternative with no entry and the default policy.
func NewImageAlternative(name string) *ImageAlternativeBuilder {
	b := &ImageAlternativeBuilder{}
	b.obj.Name = name
	return b
}

func (b *ImageAlternativeBuilder) Policy(p v1alpha1.RewritePolicy) *ImageAlternativeBuilder {
	b.obj.Spec.RewritePolicy = p
	return b
}

// Repository adds an entry of the repository form.
func (b *ImageAlternativeBuilder) Repository(repo string) *ImageAlternativeBuilder {
	b.obj.Spec.Alternatives = append(b.obj.Spec.Alternatives, v1alpha1.Alternative{Repository: repo})
	return b
}

// Group adds an entry of the repositoryGroup form.
func (b *ImageAlternativeBuilder) Group(path string) *ImageAlternativeBuilder {
	b.obj.Spec.Alternatives = append(b.obj.Spec.Alternatives, v1alpha1.Alternative{RepositoryGroup: path})
	return b
}

// Entry adds an entry as given, for shapes the other methods cannot make.
func (b *ImageAlternativeBuilder) Entry(a v1alpha1.Alternative) *ImageAlternativeBuilder {
	b.obj.Spec.Alternatives = append(b.obj.Spec.Alternatives, a)
	return b
}

func (b *ImageAlternativeBuilder) Insecure() *ImageAlternativeBuilder {
	b.last().Insecure = true
	return b
}

func (b *ImageAlternativeBuilder) Unavailable() *ImageAlternativeBuilder {
	b.last().Unavailable = true
	return b
}

func (b *ImageAlternativeBuilder) SecretRef(name string) *ImageAlternativeBuilder {
	b.last().Auth = &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: name}}
	return b
}

func (b *ImageAlternativeBuilder) Provider(name string) *ImageAlternativeBuilder {
	b.last().Auth = &v1alpha1.Auth{Provider: &v1alpha1.ProviderAuth{Name: name}}
	return b
}

// Inject sets injectPullSecret on the last entry's auth, which must have been set.
func (b *ImageAlternativeBuilder) Inject(inject bool) *ImageAlternativeBuilder {
	b.last().Auth.InjectPullSecret = &inject
	return b
}

func (b *ImageAlternativeBuilder) PodSelector(matchLabels map[string]string) *ImageAlternativeBuilder {
	b.obj.Spec.PodSelector = &metav1.LabelSelector{MatchLabels: matchLabels}
	return b
}

func (b *ImageAlternativeBuilder) NamespaceSelector(matchLabels map[string]string) *ImageAlternativeBuilder {
	b.obj.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: matchLabels}
	return b
}

// Build returns a copy, so one builder can seed several objects.
func (b *ImageAlternativeBuilder) Build() v1alpha1.ImageAlternative {
	return *b.obj.DeepCopy()
}

func (b *ImageAlternativeBuilder) last() *v1alpha1.Alternative {
	return &b.obj.Spec.Alternatives[len(b.obj.Spec.Alternatives)-1]
}

// ImageMirrorBuilder builds an ImageMirror.
type ImageMirrorBuilder struct {
	obj v1alpha1.ImageMirror
}

// NewImageMirror starts an ImageMirror to path with the default policy.
func NewImageMirror(name, path string) *ImageMirrorBuilder {
	b := &ImageMirrorBuilder{}
	b.obj.Name = name
	b.obj.Spec.Destination.Path = path
	return b
}

func (b *ImageMirrorBuilder) Policy(p v1alpha1.RewritePolicy) *ImageMirrorBuilder {
	b.obj.Spec.RewritePolicy = p
	return b
}

func (b *ImageMirrorBuilder) Exclude(globs ...string) *ImageMirrorBuilder {
	b.obj.Spec.ExcludeImages = append(b.obj.Spec.ExcludeImages, globs...)
	return b
}

func (b *ImageMirrorBuilder) Insecure() *ImageMirrorBuilder {
	b.obj.Spec.Destination.Insecure = true
	return b
}

func (b *ImageMirrorBuilder) SecretRef(name string) *ImageMirrorBuilder {
	b.obj.Spec.Destination.Pull = &v1alpha1.MirrorPull{Auth: &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: name}}}
	return b
}

func (b *ImageMirrorBuilder) Provider(name string) *ImageMirrorBuilder {
	b.obj.Spec.Destination.Pull = &v1alpha1.MirrorPull{Auth: &v1alpha1.Auth{Provider: &v1alpha1.ProviderAuth{Name: name}}}
	return b
}

// Inject sets injectPullSecret on the mirror's auth, which must have been set.
func (b *ImageMirrorBuilder) Inject(inject bool) *ImageMirrorBuilder {
	b.obj.Spec.Destination.Pull.Auth.InjectPullSecret = &inject
	return b
}

func (b *ImageMirrorBuilder) PodSelector(matchLabels map[string]string) *ImageMirrorBuilder {
	b.obj.Spec.PodSelector = &metav1.LabelSelector{MatchLabels: matchLabels}
	return b
}

func (b *ImageMirrorBuilder) NamespaceSelector(matchLabels map[string]string) *ImageMirrorBuilder {
	b.obj.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: matchLabels}
	return b
}

// Build returns a copy, so one builder can seed several objects.
func (b *ImageMirrorBuilder) Build() v1alpha1.ImageMirror {
	return *b.obj.DeepCopy()
}

// DryRun sets spec.dryRun.
func (b *ImageAlternativeBuilder) DryRun() *ImageAlternativeBuilder {
	b.obj.Spec.DryRun = true
	return b
}

// PinDigest sets spec.pinDigest.
func (b *ImageAlternativeBuilder) PinDigest() *ImageAlternativeBuilder {
	b.obj.Spec.PinDigest = true
	return b
}

// RecreateStuckPods sets spec.recreateStuckPods.
func (b *ImageAlternativeBuilder) RecreateStuckPods() *ImageAlternativeBuilder {
	b.obj.Spec.RecreateStuckPods = true
	return b
}

// DryRun sets spec.dryRun.
func (b *ImageMirrorBuilder) DryRun() *ImageMirrorBuilder {
	b.obj.Spec.DryRun = true
	return b
}

// PinDigest sets spec.pinDigest.
func (b *ImageMirrorBuilder) PinDigest() *ImageMirrorBuilder {
	b.obj.Spec.PinDigest = true
	return b
}

// RecreateStuckPods sets spec.recreateStuckPods.
func (b *ImageMirrorBuilder) RecreateStuckPods() *ImageMirrorBuilder {
	b.obj.Spec.RecreateStuckPods = true
	return b
}

// Alternative is an ImageAlternative with these entries, for tests that need nothing else.
func Alternative(name string, policy v1alpha1.RewritePolicy, entries ...v1alpha1.Alternative) v1alpha1.ImageAlternative {
	return v1alpha1.ImageAlternative{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.ImageAlternativeSpec{RewritePolicy: policy, Alternatives: entries},
	}
}

// WithSecret is an alternative entry whose credential is the Secret secret.
func WithSecret(repo, secret string) v1alpha1.Alternative {
	return v1alpha1.Alternative{Repository: repo, Auth: &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: secret}}}
}
