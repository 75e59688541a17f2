//go:build !verbs

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Println("BADCM: ERROR built without -tags verbs (needs cgo and rdma-core)")
	os.Exit(2)
}
