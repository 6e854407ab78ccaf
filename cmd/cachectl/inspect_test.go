package main

import (
	"errors"
	"testing"

	"github.com/shardcache/shardcache/sdk/admin"
)

func TestInspectOutput(t *testing.T) {
	in := &inspection{URL: "https://www.example.com/a.css", Policy: "static", Key: "httpswww.example.com/a.css",
		Owners: []string{"node-2", "node-1"}, Stored: true, Nodes: []nodeInspection{
			{Node: "node-1", Owner: true, Objects: []admin.StoredObject{}, Last: &admin.LastAnswer{Reason: "purged", Age: 60}},
			{Node: "node-2", Owner: true, Objects: []admin.StoredObject{
				{Kind: "variant", Variant: "accept-encoding=gzip", Tier: "disk", Status: 200, Size: 12345, Age: 30, FreshFor: 570,
					Freshness: "Cache-Control: max-age=600", ETag: `"e1"`, Tags: []string{"css", "site"}},
				{Kind: "part", Range: "bytes 0-99/1000", Tier: "memory", Status: 206, Size: 100, Age: 700, FreshFor: -100,
					Freshness: "Cache-Control: max-age=600"}}},
			{Node: "node-3", Objects: []admin.StoredObject{{Kind: "hot copy", Tier: "memory", Status: 200, Size: 12345, Age: 5, FreshFor: 595,
				Freshness: "Cache-Control: max-age=600"}}, Last: &admin.LastAnswer{Cache: "MISS", Reason: "set-cookie", Status: 200, Age: 3}},
			{Node: "node-4", Unreachable: errors.New("node-4 unreachable at http://10.0.0.4:9191: connection refused").Error(), Objects: []admin.StoredObject{}},
		}}
	goldenFormats(t, "inspect", in, inspectTable)
	none := &inspection{URL: "https://www.example.com/none", Policy: "default", Key: "httpswww.example.com/none", Owners: []string{"node-1"},
		Nodes: []nodeInspection{{Node: "node-1", Owner: true, Objects: []admin.StoredObject{},
			Last: &admin.LastAnswer{Cache: "EXPIRED", Reason: "expired", Status: 200, Stored: true, Age: 2}}}}
	goldenFormats(t, "inspect-none", none, inspectTable)
}
