package validate

import (
	"sync"

	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"
	"k8s.io/utils/lru"
)

// The Event budget, as client-go's recorder spam filter (record.EventSourceObjectSpamFilter) keeps one:
// a token bucket per key in an LRU cache.
const (
	// Each requester may leave 25 Events about one object, then one every 5 minutes: client-go's
	// defaults per source and object.
	objectEventBurst = 25
	objectEventQPS   = 1. / 300
	// Each source may leave 100 Events across objects, then one every 10 seconds. A source is a pod the
	// cache of injected pods knows, or everyone else fenced in one namespace: an AdmissionReview can name
	// any object, so a bucket per object alone would not bound what one requester writes.
	sourceEventBurst = 100
	sourceEventQPS   = 1. / 10
	// Keys remembered; one forgotten starts again with a full bucket, so this bounds memory, not Events.
	eventBudgetEntries = 4096
)

// EventBudget bounds the LeaderGateDenied Events the fence writes. The webhook answers whoever reaches
// its port, and an AdmissionReview's requester, object and namespace are whatever its sender wrote, so
// without a bound a pod that POSTs made-up reviews writes as many Events as it likes: Events are the
// audit trail, and each one is an etcd write.
//
// A write is recorded only while both its (object, requester) bucket and its source's bucket have a
// token. A requester's first denial on an object always finds a full (object, requester) bucket; it
// finds a full source bucket too when the requester is a pod leasegate injected (its own source), so a
// flood cannot hide a genuine new requester's first denial. Requesters the caches cannot confirm share
// their namespace's source bucket: a flood in a namespace can use up that bucket for the others there.
type EventBudget struct {
	clock clock.PassiveClock

	mu      sync.Mutex
	objects *lru.Cache // object and requester -> flowcontrol.PassiveRateLimiter
	sources *lru.Cache // source -> flowcontrol.PassiveRateLimiter
}

// NewEventBudget is an empty budget on clock.
func NewEventBudget(clock clock.PassiveClock) *EventBudget {
	return &EventBudget{clock: clock, objects: lru.New(eventBudgetEntries), sources: lru.New(eventBudgetEntries)}
}

// EventKey names what an Event is charged to.
type EventKey struct {
	// Object is the object the Event regards.
	Object string
	// Requester is who was fenced, as the review names it.
	Requester string
	// Source is the requester's pod when the cache of injected pods confirms it, or else the namespace
	// whose unconfirmed requesters share one bucket.
	Source string
}

// Allow reports whether an Event for key fits the budget. It spends a token of the object's bucket, and
// of the source's only when the object's allowed it: a refusal by the source may cost an object token,
// which only delays that object's next Event, never lets one more through.
func (b *EventBudget) Allow(key EventKey) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	source := b.bucket(b.sources, key.Source, sourceEventQPS, sourceEventBurst)
	object := b.bucket(b.objects, key.Object+"\x00"+key.Requester, objectEventQPS, objectEventBurst)
	// The object's bucket first: a requester repeating itself on one object spends its own tokens, not
	// its source's.
	return object.TryAccept() && source.TryAccept()
}

func (b *EventBudget) bucket(cache *lru.Cache, key string, qps float32, burst int) flowcontrol.PassiveRateLimiter {
	if limiter, ok := cache.Get(key); ok {
		return limiter.(flowcontrol.PassiveRateLimiter)
	}
	limiter := flowcontrol.NewTokenBucketPassiveRateLimiterWithClock(qps, burst, b.clock)
	cache.Add(key, limiter)
	return limiter
}
