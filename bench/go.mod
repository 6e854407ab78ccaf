module github.com/shardcache/shardcache/bench

go 1.26.0

require github.com/shardcache/shardcache/sdk v0.0.0

require golang.org/x/image v0.48.0

replace github.com/shardcache/shardcache/sdk => ../sdk
