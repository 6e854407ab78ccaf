package admin_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shardcache/shardcache/sdk/admin"
)

// controlPlane and token are those of the dev cluster TestMain starts; a
// program would use its cluster's address and admin token.

func ExampleNew() {
	c, err := admin.New(admin.Config{Address: controlPlane, Token: token})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	resp, err := c.ListNodes(context.Background())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("nodes:", len(resp.GetNodes()))
	// Output: nodes: 3
}

func ExampleNew_wrongToken() {
	c, err := admin.New(admin.Config{Address: controlPlane, Token: "not-the-token"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	_, err = c.ListNodes(context.Background())
	fmt.Println("unauthenticated:", errors.Is(err, admin.ErrUnauthenticated))
	// Output: unauthenticated: true
}

func ExampleClient_PurgeURL() {
	c, err := admin.New(admin.Config{Address: controlPlane, Token: token})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	// Wait up to 30s for every node to acknowledge; a node that does not
	// is listed as pending and applies the purge when it reconnects.
	st, err := c.PurgeURL(context.Background(), "https://www.example.com/index.html", admin.PurgeOptions{Wait: 30 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("complete:", st.GetComplete(), "results:", len(st.GetResults()), "pending:", st.GetPending())
	// Output: complete: true results: 3 pending: []
}

func ExampleClient_PurgePrefix() {
	c, err := admin.New(admin.Config{Address: controlPlane, Token: token})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	ctx := context.Background()
	st, err := c.PurgePrefix(ctx, "www.example.com", "/static/", admin.PurgeOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("complete:", st.GetComplete())

	// Purging everything of a host needs All; without it the control plane
	// refuses the purge.
	_, err = c.PurgePrefix(ctx, "www.example.com", "/", admin.PurgeOptions{})
	fmt.Println("refused:", errors.Is(err, admin.ErrInvalid))
	// Output:
	// complete: true
	// refused: true
}

func ExampleClient_PurgeTag() {
	c, err := admin.New(admin.Config{Address: controlPlane, Token: token})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	ctx := context.Background()
	// A request id of the caller's makes the purge easy to follow later,
	// and repeating it purges nothing twice.
	id := admin.NewRequestID()
	if _, err := c.PurgeTag(ctx, "product-42", admin.PurgeOptions{RequestID: id}); err != nil {
		fmt.Println(err)
		return
	}
	st, err := c.GetPurge(ctx, id, 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(st.GetPurge().GetKind(), st.GetPurge().GetTag(), "complete:", st.GetComplete())
	// Output: PURGE_KIND_TAG product-42 complete: true
}
