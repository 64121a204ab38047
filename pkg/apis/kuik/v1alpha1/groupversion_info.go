package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the group and version of the routing resources.
var GroupVersion = schema.GroupVersion{Group: "kuik.enix.io", Version: "v1alpha1"}

var (
	// SchemeBuilder registers the routing resources in a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the routing resources to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion,
		&ImageAlternative{}, &ImageAlternativeList{},
		&ImageMirror{}, &ImageMirrorList{},
	)
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
