package front

import (
	"crypto/subtle"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/shardcache/shardcache/dataplane/owner"
	"github.com/shardcache/shardcache/dataplane/registry"
)

// A mirror policy (one with registries) serves pulls of container images
// from the registries it lists, and nothing else: the front checks the
// cluster's pull token when the policy has one, refuses writes, answers
// GET /v2/ itself, and parses the request once into the Ref the owner
// fetches by (its upstream, and the key that content by digest shares).

// mirror decides a request under a mirror policy: false when it answered
// it (a refusal, or /v2/ itself); else req carries its Ref and key.
func (f *Front) mirror(w http.ResponseWriter, req *owner.Request) (owner.Outcome, bool) {
	r, p := req.HTTP, req.Policy
	refused := owner.Outcome{Served: true}
	if p.PullTokenFile != "" && !f.pullTokens.allowed(p.PullTokenFile, r) {
		w.Header().Set("Www-Authenticate", `Basic realm="shardcache mirror"`)
		registry.WriteError(w, &registry.Error{Status: http.StatusUnauthorized, Code: registry.CodeUnauthorized,
			Message: "this mirror needs the cluster's pull token (Authorization: Bearer <token>, or as a Basic password)"}, 0, "")
		return refused, false
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		registry.WriteError(w, &registry.Error{Status: http.StatusMethodNotAllowed, Code: registry.CodeUnsupported,
			Message: "the mirror serves pulls only: push to the registry itself"}, 0, "")
		return refused, false
	}
	ref, err := registry.Parse(r, p)
	if err != nil {
		registry.WriteError(w, err, http.StatusBadRequest, "")
		return refused, false
	}
	if ref.Kind == registry.KindBase {
		registry.WriteBase(w)
		return refused, false
	}
	req.Registry, req.Key = ref, ref.Key()
	return owner.Outcome{}, true
}

// pullTokens reads a policy's pull token file, again at most every
// pullTokenRecheck, so that a rotated secret is taken up without a restart
// and a request costs no file read.
type pullTokens struct {
	mu   sync.Mutex
	read map[string]pullToken // by file; one per mirror policy, cleared past maxPullTokenFiles
}

type pullToken struct {
	value string
	at    time.Time
}

const (
	pullTokenRecheck  = 5 * time.Second
	maxPullTokenFiles = 64
)

// allowed reports whether r carries the token in file: as a Bearer token
// or as the password of Basic credentials. A file that cannot be read, or
// is empty, admits no one.
func (t *pullTokens) allowed(file string, r *http.Request) bool {
	want := t.token(file)
	if want == "" {
		return false
	}
	got := ""
	if _, pass, ok := r.BasicAuth(); ok {
		got = pass
	} else if b, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		got = strings.TrimSpace(b)
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

func (t *pullTokens) token(file string) string {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if tok, ok := t.read[file]; ok && now.Sub(tok.at) < pullTokenRecheck {
		return tok.value
	}
	if t.read == nil || len(t.read) >= maxPullTokenFiles {
		t.read = map[string]pullToken{}
	}
	b, err := os.ReadFile(file)
	value := ""
	if err == nil {
		value = strings.TrimSpace(string(b))
	}
	t.read[file] = pullToken{value: value, at: now}
	return value
}
