package admin

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/opsclient"
)

// A node's views are read from the ops URL its member advertises, which
// anyone holding the join token can register: what reaches it is a read
// grant for that node, never the token the client holds.
func TestAnAdvertisedOpsURLGetsAGrantNotTheToken(t *testing.T) {
	got := make(chan string, 1)
	ops := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Authorization")
		w.Write([]byte("{}"))
	}))
	defer ops.Close()
	c, err := New(Config{Address: "127.0.0.1:1", Token: "the-admin-token"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n := &pb.Node{Member: &pb.Member{Id: "node-7", OpsUrl: ops.URL}}
	if _, err := c.opsGet(context.Background(), n, "/stats"); err != nil {
		t.Fatal(err)
	}
	auth := <-got
	grant, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok || strings.Contains(auth, "the-admin-token") {
		t.Fatalf("the ops URL got %q", auth)
	}
	if err := opsclient.CheckReadGrant("the-admin-token", "node-7", grant, time.Now()); err != nil {
		t.Fatalf("the ops URL got %q, not a read grant for node-7: %v", grant, err)
	}
	if err := opsclient.CheckReadGrant("the-admin-token", "node-1", grant, time.Now()); err == nil {
		t.Fatal("the grant node-7's listener got opens node-1's views too")
	}
}

// A node's answer is read up to a bound; a larger one is an error naming
// the node, not a cut answer that fails to decode.
func TestAnOversizedOpsAnswerIsRefusedNamingTheNode(t *testing.T) {
	ops := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"hot_keys":["` + strings.Repeat("k", maxOpsAnswer) + `"]}`))
	}))
	defer ops.Close()
	c, err := New(Config{Address: "127.0.0.1:1", Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n := &pb.Node{Member: &pb.Member{Id: "node-7", OpsUrl: ops.URL}}
	_, err = c.opsGet(context.Background(), n, "/stats")
	if err == nil || !strings.Contains(err.Error(), "node-7 /stats: the node's answer is larger than") {
		t.Fatalf("opsGet = %v; want an error naming node-7 and the bound", err)
	}
}
