package dataplane

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// What one client's answer may give another: each test has an origin
// answer one client something of its own, then checks that a second
// client, whose request selects another answer, is not served it.

// fetch is do for a goroutine other than the test's: the body, or the
// error.
func fetch(url string, hdr ...string) (string, error) {
	_, body, err := fetchAnswer(url, hdr...)
	return body, err
}

// fetchAnswer is fetch with the answer's X-Cache; a "Host" in hdr is the
// request's Host.
func fetchAnswer(url string, hdr ...string) (xcache, body string, err error) {
	req, err := newRequest(http.MethodGet, url, hdr...)
	if err != nil {
		return "", "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.Header.Get("X-Cache"), string(b), err
}

// A request waiting on another's revalidation of its variant takes the
// revalidated answer only if its own Vary fields select it; else it asks
// on its own. It was served the other client's variant.
func TestAWaitingRequestTakesOnlyItsOwnVariant(t *testing.T) {
	revalidating, release := make(chan struct{}, 1), make(chan struct{})
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user := r.Header.Get("X-User")
		w.Header().Set("Vary", "X-User")
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("ETag", `"`+user+`"`)
		if r.Header.Get("If-None-Match") != "" {
			select {
			case revalidating <- struct{}{}:
			default:
			}
			<-release
			w.WriteHeader(http.StatusNotModified)
			return
		}
		io.WriteString(w, "private page of "+user)
	}))
	defer origin.Close()
	_, n := startOne(t, origin.URL, noHotKeys)
	url := "http://" + n.ClientAddr().String() + "/account"
	if _, body := do(t, "GET", url, "X-User", "alice"); body != "private page of alice" {
		t.Fatalf("alice: %q", body)
	}
	alice := make(chan string, 1)
	go func() { body, _ := fetch(url, "X-User", "alice", "Cache-Control", "no-cache"); alice <- body }()
	select {
	case <-revalidating:
	case <-time.After(30 * time.Second):
		t.Fatal("alice's revalidation never reached the origin")
	}
	mallory := make(chan string, 1)
	go func() { body, err := fetch(url, "X-User", "mallory"); mallory <- body + errString(err) }()
	waitFor(t, "mallory's request to wait on alice's revalidation", func() bool { return n.owner.Waiting() > 0 })
	close(release)
	if body := <-alice; body != "private page of alice" {
		t.Errorf("alice, revalidated: %q", body)
	}
	if body := <-mallory; body != "private page of mallory" {
		t.Fatalf("mallory (X-User: mallory) was served %q", body)
	}
}

func errString(err error) string {
	if err != nil {
		return " (" + err.Error() + ")"
	}
	return ""
}

// A 304 is merged into what is stored as a new answer would be judged: a
// Set-Cookie it brings (an origin renewing this client's session) goes to
// this client alone, and a 304 that makes the answer unstorable removes
// what was stored. The cookie was stored and served to every client.
func TestARevalidationKeepsWhatIsPrivateOutOfTheStore(t *testing.T) {
	var noStore atomic.Bool
	var full atomic.Int32
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"v1"`)
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.Header().Set("Cache-Control", "max-age=600")
			if noStore.Load() {
				w.Header().Set("Cache-Control", "no-store")
			}
			if c, err := r.Cookie("sid"); err == nil {
				w.Header().Set("Set-Cookie", "sid="+c.Value+"-renewed; Path=/; HttpOnly")
			}
			w.WriteHeader(http.StatusNotModified)
			return
		}
		full.Add(1)
		w.Header().Set("Cache-Control", "max-age=0")
		io.WriteString(w, "public page")
	}))
	defer origin.Close()
	_, n := startOne(t, origin.URL, noHotKeys)
	base := "http://" + n.ClientAddr().String()

	do(t, "GET", base+"/news")
	resp, body := do(t, "GET", base+"/news", "Cookie", "sid=alice42")
	if got := resp.Header.Get("Set-Cookie"); body != "public page" || !strings.Contains(got, "alice42-renewed") {
		t.Fatalf("alice's revalidation: %q, Set-Cookie %q; want the page and her renewed cookie", body, got)
	}
	resp, body = do(t, "GET", base+"/news")
	if sc := resp.Header.Values("Set-Cookie"); len(sc) > 0 || body != "public page" || resp.Header.Get("X-Cache") != "HIT" {
		t.Fatalf("bob: %q, X-Cache %s, Set-Cookie %q; want the stored page, a hit, and no cookie", body, resp.Header.Get("X-Cache"), sc)
	}

	noStore.Store(true)
	do(t, "GET", base+"/gone")
	if resp, _ := do(t, "GET", base+"/gone", "Cache-Control", "no-cache"); resp.StatusCode != http.StatusOK {
		t.Fatalf("the revalidation answered no-store: %d", resp.StatusCode)
	}
	before := full.Load()
	if resp, _ := do(t, "GET", base+"/gone"); resp.Header.Get("X-Cache") == "HIT" || full.Load() != before+1 {
		t.Fatalf("after a 304 saying no-store: X-Cache %s, %d full fetches; want the stored answer gone and the page fetched again",
			resp.Header.Get("X-Cache"), full.Load()-before)
	}
}

// The Accept-Language fallback (a variant whose Content-Language is the
// language asked for) takes only variants negotiated by language alone:
// one stored while the URL varied on Cookie too is a signed-in client's.
func TestTheLanguageFallbackServesOnlyLanguageVariants(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		lang := "en"
		if strings.HasPrefix(r.Header.Get("Accept-Language"), "fr") {
			lang = "fr"
		}
		w.Header().Set("Content-Language", lang)
		if c, err := r.Cookie("sid"); err == nil {
			w.Header().Set("Vary", "Accept-Language, Cookie")
			io.WriteString(w, lang+" page of "+c.Value)
			return
		}
		w.Header().Set("Vary", "Accept-Language")
		io.WriteString(w, lang+" page for guests")
	}))
	defer origin.Close()
	_, n := startOne(t, origin.URL, noHotKeys)
	url := "http://" + n.ClientAddr().String() + "/home"
	if _, body := do(t, "GET", url, "Accept-Language", "en", "Cookie", "sid=alice"); body != "en page of alice" {
		t.Fatalf("alice: %q", body)
	}
	do(t, "GET", url, "Accept-Language", "fr") // the URL now varies on Accept-Language alone
	if _, body := do(t, "GET", url, "Accept-Language", "en"); body != "en page for guests" {
		t.Fatalf("a guest (no Cookie) asking for en was served %q", body)
	}
	// The fallback itself still serves a language variant to another list.
	resp, body := do(t, "GET", url, "Accept-Language", "en;q=0.9, de;q=0.1")
	if body != "en page for guests" || resp.Header.Get("X-Cache") != "HIT" {
		t.Fatalf("another list preferring en: %q, X-Cache %s; want the guests' en page, a hit", body, resp.Header.Get("X-Cache"))
	}
}

// Under partial_content, a stored part follows the policy's vary_by as a
// whole answer does: a part varying on a field is not stored. One
// tenant's bytes were served to another's range, and a range covering the
// whole object to every client's GET.
func TestPartsFollowThePolicysVaryBy(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("ETag", `"`+r.Header.Get("X-Tenant")+`"`)
		http.ServeContent(w, r, "", time.Time{}, strings.NewReader(strings.Repeat(r.Header.Get("X-Tenant")+"-", 20)))
	}))
	defer origin.Close()
	_, n := startOne(t, origin.URL, noHotKeys)
	if err := n.ApplyPolicies(&pb.PolicySet{Revision: 1, Policies: []*pb.CachePolicy{
		{Name: "parts", PathPrefix: "/", PartialContent: true, VaryBy: []string{"X-Tenant"}},
	}}); err != nil {
		t.Fatal(err)
	}
	base := "http://" + n.ClientAddr().String()
	if resp, body := do(t, "GET", base+"/file", "X-Tenant", "aaaa", "Range", "bytes=0-9"); resp.StatusCode != 206 || body != "aaaa-aaaa-" {
		t.Fatalf("tenant aaaa: %d %q", resp.StatusCode, body)
	}
	if resp, body := do(t, "GET", base+"/file", "X-Tenant", "bbbb", "Range", "bytes=0-9"); body != "bbbb-bbbb-" {
		t.Fatalf("tenant bbbb asked for its bytes 0-9 and was served %q (X-Cache %s)", body, resp.Header.Get("X-Cache"))
	}
	if resp, _ := do(t, "GET", base+"/whole", "X-Tenant", "aaaa", "Range", "bytes=0-"); resp.StatusCode != 206 {
		t.Fatalf("tenant aaaa, the whole range: %d", resp.StatusCode)
	}
	if resp, body := do(t, "GET", base+"/whole", "X-Tenant", "bbbb"); strings.Contains(body, "aaaa") {
		t.Fatalf("tenant bbbb's GET of the whole object was served %q (X-Cache %s)", body, resp.Header.Get("X-Cache"))
	}
}

// A policy is chosen by the host's name, as the key is made from it: a
// port in Host chose no policy of the host's, so an answer was stored
// without the host's vary_by under the key its clients read.
func TestAPortInHostChoosesTheHostsPolicy(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600") // varies on X-Tenant, unsaid
		io.WriteString(w, "page of tenant "+r.Header.Get("X-Tenant"))
	}))
	defer origin.Close()
	_, n := startOne(t, origin.URL, noHotKeys)
	if err := n.ApplyPolicies(&pb.PolicySet{Revision: 1, Policies: []*pb.CachePolicy{
		{Name: "victim", Hosts: []string{"victim.example"}, PathPrefix: "/", VaryBy: []string{"X-Tenant"}},
		{Name: "rest", PathPrefix: "/"},
	}}); err != nil {
		t.Fatal(err)
	}
	addr := n.ClientAddr().String()
	raw(t, addr, "GET /t HTTP/1.1\r\nHost: victim.example:80\r\nX-Tenant: mallory\r\nConnection: close\r\n\r\n")
	if got := raw(t, addr, "GET /t HTTP/1.1\r\nHost: victim.example\r\nX-Tenant: alice\r\nConnection: close\r\n\r\n"); !strings.HasSuffix(got, "page of tenant alice") {
		t.Fatalf("alice (policy victim, vary_by X-Tenant): %q", got)
	}
}
