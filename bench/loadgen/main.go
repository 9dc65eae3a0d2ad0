// Command loadgen drives unary gRPC calls with pre-encoded request bytes at a fixed concurrency
// and prints one JSON line of results. bench:rpc uses it as the client for both servers it
// compares: grpc-go over one connection spends a fraction of the CPU per call that a Node client
// does, so on a machine whose cores the client shares with the server, the figures are the
// servers' rather than the client's.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
)

// rawCodec sends and receives message bytes as they are: requests are encoded once, up front, and
// responses are not decoded (the caller only needs their length).
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = data
	return nil
}
func (rawCodec) Name() string { return "proto" }

type result struct {
	Calls         int     `json:"calls"`
	WarmupCalls   int     `json:"warmupCalls"`
	Seconds       float64 `json:"seconds"`
	P50Ms         float64 `json:"p50Ms"`
	P99Ms         float64 `json:"p99Ms"`
	ResponseBytes int     `json:"responseBytes"`
}

func main() {
	address := flag.String("address", "", "host:port")
	method := flag.String("method", "", "full method path, /package.Service/Method")
	requestFile := flag.String("request", "", "file holding the request message bytes")
	requestsFile := flag.String("requests", "", "instead of -request: a file of requests, each a 4-byte big-endian length and the message; each call sends the next one, and running out is an error")
	concurrency := flag.Int("concurrency", 1, "calls in flight")
	duration := flag.Duration("duration", 2*time.Second, "how long to measure")
	warmup := flag.Duration("warmup", time.Second, "how long to call before measuring")
	connections := flag.Int("connections", 1, "HTTP/2 connections the calls are spread over (a sidecar with --workers serves each connection from one worker)")
	flag.Parse()
	next, err := requestSource(*requestFile, *requestsFile)
	if err != nil {
		fail(err)
	}
	encoding.RegisterCodec(rawCodec{})
	var pool []*grpc.ClientConn
	for index := 0; index < max(1, *connections); index++ {
		// Each ClientConn has its own transport (grpc-go shares none between ClientConns).
		connection, err := grpc.NewClient(*address,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{}), grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)),
			grpc.WithInitialWindowSize(16<<20), grpc.WithInitialConnWindowSize(64<<20))
		if err != nil {
			fail(err)
		}
		defer connection.Close()
		pool = append(pool, connection)
	}
	var turn atomic.Int64
	call := func() (int, error) {
		request, err := next()
		if err != nil {
			return 0, err
		}
		response := []byte(nil)
		connection := pool[int(turn.Add(1))%len(pool)]
		err = connection.Invoke(context.Background(), *method, &request, &response)
		return len(response), err
	}
	responseBytes, err := call()
	if err != nil {
		fail(err)
	}
	warm, _ := run(call, *concurrency, *warmup)
	latencies, elapsed := run(call, *concurrency, *duration)
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	at := func(q float64) float64 {
		index := int(q * float64(len(latencies)))
		if index >= len(latencies) {
			index = len(latencies) - 1
		}
		return float64(latencies[index]) / float64(time.Millisecond)
	}
	out, _ := json.Marshal(result{Calls: len(latencies), WarmupCalls: len(warm) + 1, Seconds: elapsed.Seconds(), P50Ms: at(0.5), P99Ms: at(0.99), ResponseBytes: responseBytes})
	fmt.Println(string(out))
}

// requestSource hands out the request of every call: always the same one, or the next of a list
// (requests that must not repeat, such as commits with an expected version).
func requestSource(single, list string) (func() ([]byte, error), error) {
	if list == "" {
		request, err := os.ReadFile(single)
		return func() ([]byte, error) { return request, nil }, err
	}
	data, err := os.ReadFile(list)
	if err != nil {
		return nil, err
	}
	var requests [][]byte
	for len(data) >= 4 {
		length := int(binary.BigEndian.Uint32(data))
		if len(data) < 4+length {
			return nil, fmt.Errorf("%s: a request is cut short", list)
		}
		requests = append(requests, data[4:4+length])
		data = data[4+length:]
	}
	var taken atomic.Int64
	return func() ([]byte, error) {
		index := taken.Add(1) - 1
		if index >= int64(len(requests)) {
			return nil, fmt.Errorf("%s: all %d requests sent", list, len(requests))
		}
		return requests[index], nil
	}, nil
}

// run calls from `concurrency` goroutines until `duration` is over; every call must succeed.
func run(call func() (int, error), concurrency int, duration time.Duration) ([]time.Duration, time.Duration) {
	var mutex sync.Mutex
	var all []time.Duration
	var group sync.WaitGroup
	started := time.Now()
	until := started.Add(duration)
	for worker := 0; worker < concurrency; worker++ {
		group.Add(1)
		go func() {
			defer group.Done()
			var mine []time.Duration
			for time.Now().Before(until) {
				before := time.Now()
				if _, err := call(); err != nil {
					fail(err)
				}
				mine = append(mine, time.Since(before))
			}
			mutex.Lock()
			all = append(all, mine...)
			mutex.Unlock()
		}()
	}
	group.Wait()
	return all, time.Since(started)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "loadgen:", err)
	os.Exit(1)
}
