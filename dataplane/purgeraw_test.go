package dataplane

import (
	"strings"
	"testing"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// A path's raw UTF-8 is keyed escaped, beside the escapes the client sent
// (its %2F stays a %2F: a segment holding a slash is not two segments),
// and a URL purge spelled as the client sent it reaches the object.
// Since policy.NormalEscapes escapes bytes outside ASCII, the node keys
// /a%2Fb/café as /a%2Fb/caf%C3%A9, while a purge URL of the same spelling
// was read through url.URL.EscapedPath, which drops the raw path of any
// holding a byte outside ASCII and spells it /a/b/caf%C3%A9: the purge
// named another URL, and the object stayed served.
func TestAURLPurgeOfARawPathWithAnEscapedSlashReachesIt(t *testing.T) {
	origin, ourl := newPurgeOrigin(t)
	fc, n := startOne(t, ourl, noHotKeys)
	addr := n.ClientAddr().String()
	const target = "/a%2Fb/caf\u00e9"
	get := func() string {
		return raw(t, addr, "GET "+target+" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
	}
	get()
	if got := get(); !strings.Contains(got, "\r\nX-Cache: HIT\r\n") {
		t.Fatalf("GET %s again: %q, want a hit", target, got)
	}
	origin.gen.Store(2)
	fc.pushPurge(&pb.Purge{Id: "raw", Kind: pb.PurgeKind_PURGE_KIND_URL, Url: "http://127.0.0.1" + target, Revision: 1})
	waitFor(t, "the purge applied", func() bool { return n.PurgeRevision() == 1 })
	if got := get(); strings.Contains(got, "\r\n\r\nv1 ") {
		t.Errorf("GET %s after the URL purge of http://127.0.0.1%s: %q, want the object gone", target, target, got)
	}
}
