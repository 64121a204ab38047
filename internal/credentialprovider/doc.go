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
//
// # Exec
//
// [Plugins.Get] runs binDir/<provider name> as the kubelet does (pkg/credentialprovider/plugin/
// plugin.go): the configured args; the process environment plus the configured env (which
// wins); a CredentialProviderRequest of the configured apiVersion on stdin (image without tag or
// digest, the service-account token and annotations for a provider with tokenAttributes); a
// timeout, 1 minute by default, that kills the plugin's whole process group. Its stdout (at
// most 1 MiB) is never logged nor put in an error, since it holds credentials. Its stderr may
// hold its request (a plugin echoing it leaks the service-account token): a failure is a
// [PluginError], whose message carries only the exit status (or timeout, or what is wrong with
// the response) and the first line of stderr redacted, and whose Stderr (the last 4 KiB) is for
// logs. The response must have the request's apiVersion, kind
// CredentialProviderResponse, a cacheKeyType of Image, Registry or Global, and no unknown field.
// The credential returned is the one of the auth map's most specific key matching the image,
// by the keyring rules of internal/credentials.
//
// # Cache
//
// As the kubelet's: a response is kept for its cacheDuration (absent: the provider's
// defaultCacheDuration; 0: not kept) under the image (Image), its registry host (Registry) or
// the provider (Global), within a service-account identity (the ServiceAccount and the
// annotations passed; with tokenAttributes.cacheType Token, the token too). A lookup tries the
// image, then the registry, then the global entry; [Request.MinValidity] skips entries about to
// expire. Identical concurrent requests share one exec, stopped only when every caller waiting
// for it has given up.
//
// # Where things are
//
//	config.go       Config and Provider: LoadConfig reads and decodes the files
//	validate.go     the kubelet's validation of a configuration, and CheckBinDir
//	match.go        matchImages and NormalizeImage
//	plugins.go      Plugins: Request, Credential, Options, Get
//	exec.go         one plugin run: request, response, PluginError
//	exec_unix.go    the plugin's process group (exec_other.go: elsewhere)
//	cache.go        the kubelet's response cache, by cacheKeyType
//	secret.go       a provider's kuik-provider-* Secret: its name, its format, Stored
package credentialprovider
