package main

import (
	_ "github.com/dswarbrick/smart"
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/urfave/cli/v2"
	_ "golang.org/x/sys/unix"
)

func main() {}
