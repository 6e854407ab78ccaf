module github.com/shardcache/shardcache/e2e

go 1.26.0

require github.com/shardcache/shardcache/sdk v0.0.0

replace github.com/shardcache/shardcache/sdk => ../sdk
