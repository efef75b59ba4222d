package load

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// Counts parses a load command's list of row sizes, such as "1000,5000,10000".
func Counts(list string) ([]int, error) {
	var n []int
	for _, field := range strings.Split(list, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(field))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("%q: want a comma-separated list of positive counts", list)
		}
		n = append(n, v)
	}
	return n, nil
}

// InParallel calls do for 0..n-1, 16 at a time (enough to keep a test API server busy without queueing
// behind its own limits), and returns the first error.
func InParallel(n int, do func(int) error) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	next := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				if err := do(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}
