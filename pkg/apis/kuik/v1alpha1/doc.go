// Package v1alpha1 holds the routing resources of kuik: cluster-scoped ImageAlternative and
// ImageMirror objects that declare where a pod's images may be pulled from instead, and with
// which credential.
//
// +kubebuilder:object:generate=true
// +groupName=kuik.enix.io
package v1alpha1
