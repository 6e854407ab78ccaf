package httpcache

import (
	"mime"
	"net/http"
	"strings"
)

// Origins that negotiate without saying so. A container registry chooses
// the manifest it answers /v2/<name>/manifests/<ref> with by the request's
// Accept (OCI index or manifest, Docker schema 2 or its list, schema 1),
// sends no Vary: Accept, and answers a conditional request 304 whatever the
// Accept. Stored as it comes, one client's manifest would be served to a
// client that asked for another type. So a policy's registry_aware (the
// default) stores manifests as varying on Accept, and its vary_by adds
// fields for other origins.

// manifestTypes are the media types a registry answers a manifest with.
var manifestTypes = map[string]bool{
	"application/vnd.oci.image.manifest.v1+json":                true,
	"application/vnd.oci.image.index.v1+json":                   true,
	"application/vnd.docker.distribution.manifest.v2+json":      true,
	"application/vnd.docker.distribution.manifest.list.v2+json": true,
	"application/vnd.docker.distribution.manifest.v1+json":      true,
	"application/vnd.docker.distribution.manifest.v1+prettyjws": true,
}

// registryManifest reports whether a response with header h to r is a
// registry's answer for a manifest.
func registryManifest(r *http.Request, h http.Header) bool {
	path := r.URL.Path
	if !strings.HasPrefix(path, "/v2/") || !strings.Contains(path, "/manifests/") {
		return false
	}
	if h.Get("Docker-Distribution-Api-Version") != "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	return err == nil && manifestTypes[mt]
}

// AddImplicitVary adds to h's Vary the fields the origin varies on without
// naming them (varyBy, and Accept for a registry's manifest when
// registryAware), and Accept-Encoding to a coded answer's: a stored coding
// is served only to requests that accept it.
func AddImplicitVary(r *http.Request, h http.Header, varyBy []string, registryAware bool) {
	if Coded(h) {
		AddVary(h, "Accept-Encoding")
	}
	for _, f := range varyBy {
		AddVary(h, f)
	}
	if registryAware && registryManifest(r, h) {
		AddVary(h, "Accept")
	}
}
