package httpcache

// Reasons: the rule that decided an answer was not a plain hit. Each is a
// Structured Fields Token, sent as Cache-Status's detail parameter (RFC
// 9211 2.8) and the same in the access log, the log streams, inspect and
// the reason counter. An answer carries one: the last rule that decided
// it (a miss whose response was then not stored says why it was not
// stored; fwd= still says how it missed).
const (
	// Bypass: the request went around the cache (fwd=bypass, method or
	// request).
	ReasonMethod         = "method"           // neither GET nor HEAD
	ReasonAuthorization  = "authorization"    // an Authorization the policy does not cache (or, for storing, a response that does not share it: RFC 9111 3.5)
	ReasonUpgrade        = "upgrade"          // a protocol upgrade
	ReasonRequestNoStore = "request-no-store" // the request's Cache-Control: no-store
	ReasonPolicyBypass   = "policy-bypass"    // the policy's mode is bypass
	ReasonBypassRule     = "bypass-rule"      // one of the policy's bypass rules matched

	// Miss: nothing stored could be served (lookup, decide).
	ReasonURIMiss      = "uri-miss"      // nothing stored under the key
	ReasonVaryMiss     = "vary-miss"     // stored variants, none for this request's fields
	ReasonPurged       = "purged"        // what was stored was purged
	ReasonSoftPurged   = "soft-purged"   // a soft purge made it stale: served stale while revalidated, or revalidated
	ReasonInvalidated  = "invalidated"   // what was stored was dropped by an unsafe request's success (RFC 9111 4.4)
	ReasonCatchingUp   = "catching-up"   // stored before a restart, and the purges missed meanwhile are not in yet
	ReasonEncoding     = "encoding"      // stored in a content coding the request does not accept
	ReasonSliceVersion = "slice-version" // a slice of another version of the object
	ReasonOnlyIfCached = "only-if-cached"
	// Revalidated or replaced (fwd=stale).
	ReasonExpired         = "expired"          // past its freshness
	ReasonNoCache         = "no-cache"         // the response's no-cache: revalidated on every use
	ReasonMustRevalidate  = "must-revalidate"  // stale, and the response forbids serving it stale
	ReasonRequestNoCache  = "request-no-cache" // the request's no-cache (or Pragma: no-cache)
	ReasonRequestMaxAge   = "request-max-age"  // older than the request's max-age
	ReasonRequestMinFresh = "request-min-fresh"
	ReasonCutOff          = "cut-off"        // stored before the node was cut off from the control plane: confirmed first
	ReasonAuthorizeEach   = "authorize-each" // the policy has every use authorised by the origin

	// Not stored (admit): why the answer was not kept.
	ReasonNoStore        = "no-store"           // the response's no-store
	ReasonPrivate        = "private"            // the response's private
	ReasonVaryStar       = "vary-star"          // Vary: *
	ReasonSetCookie      = "set-cookie"         // a Set-Cookie the policy does not store
	ReasonStatus         = "status"             // a status not stored without explicit freshness
	ReasonMustUnderstand = "must-understand"    // must-understand, with a status whose caching rules the node does not implement (RFC 9111 5.2.2.3)
	ReasonExcluded       = "excluded"           // a status the policy excludes
	ReasonNoLifetime     = "no-lifetime"        // no freshness and no validator to revalidate with
	ReasonTooLarge       = "too-large"          // over the policy's (or the node's) largest object
	ReasonVaryLimit      = "vary-limit"         // the URL has its policy's number of variants
	ReasonAdmission      = "admission"          // the disk tier did not take it: free space below its guard, no room for the object, its stripe stopped after a disk error, or (in the outcome only, the header gone) its admission as the fill ended
	ReasonStoreError     = "store-error"        // the store failed to take it (or, for a miss, to read it back)
	ReasonSliceNoID      = "slice-no-validator" // a slice that varies on a field other than Accept-Encoding: its object's slices could not be told apart

	// Served stale, and failures.
	ReasonStaleIfError        = "stale-if-error" // the origin failed: served stale
	ReasonMaxStale            = "max-stale"      // the request allows it stale
	ReasonSWR                 = "stale-while-revalidate"
	ReasonOriginError         = "origin-error"          // no answer from the origin
	ReasonStaleIfDisconnected = "stale-if-disconnected" // the origin closed the connection unanswered: served stale (RFC 9111 4.2.4)
	ReasonTransferCoding      = "transfer-coding"       // the origin answered in a transfer coding the node cannot decode: a 502
)

// Reasons is every reason, for counters that start at zero.
var Reasons = []string{
	ReasonMethod, ReasonAuthorization, ReasonUpgrade, ReasonRequestNoStore, ReasonPolicyBypass, ReasonBypassRule,
	ReasonURIMiss, ReasonVaryMiss, ReasonPurged, ReasonSoftPurged, ReasonInvalidated, ReasonCatchingUp, ReasonEncoding, ReasonSliceVersion, ReasonOnlyIfCached,
	ReasonExpired, ReasonNoCache, ReasonMustRevalidate, ReasonRequestNoCache, ReasonRequestMaxAge, ReasonRequestMinFresh, ReasonCutOff, ReasonAuthorizeEach,
	ReasonNoStore, ReasonPrivate, ReasonVaryStar, ReasonSetCookie, ReasonStatus, ReasonMustUnderstand, ReasonExcluded, ReasonNoLifetime, ReasonTooLarge,
	ReasonVaryLimit, ReasonAdmission, ReasonStoreError, ReasonSliceNoID,
	ReasonStaleIfError, ReasonMaxStale, ReasonSWR, ReasonOriginError, ReasonStaleIfDisconnected, ReasonTransferCoding,
}
