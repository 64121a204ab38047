// Package credentialprovider obtains registry credentials the way the kubelet does, through
// its credential-provider exec plugins (ecr-credential-provider, auth-provider-gcp,
// acr-credential-provider, or any other): the same CredentialProviderConfig file and the same
// binaries that the nodes use give kuik its credentials.
//
// # Configuration
//
// [LoadConfig] reads --image-credential-provider-config as the kubelet 1.37 does
// (pkg/credentialprovider/plugin/config.go): a file, or the *.json, *.yaml and *.yml files of a
// directory in name order with their providers concatenated; kubelet.config.k8s.io v1, v1beta1
// or v1alpha1, decoded strictly with the published types (k8s.io/kubelet/config); then the
// kubelet's validation, with its wording, each error naming the file, the provider (index in
// its file and name) and the field. [Config.CheckBinDir] checks the plugin binaries as the
// kubelet does at start.
//
// # Matching
//
// A provider is asked only about images its matchImages match ([Provider.Matches]), by the
// kubelet's rules, shared with the keyring in internal/credentials
// ([credentials.MatchImage]): the image is normalized first ([NormalizeImage]: nginx:1.27 is
// docker.io/library/nginx), then a pattern matches when it has the same number of host labels,
// each matched as a glob, the same port, and a path that is a string prefix of the image's.
package credentialprovider
