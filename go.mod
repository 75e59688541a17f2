module github.com/rdisk/rdisk

go 1.26.0

require (
	github.com/dswarbrick/smart v0.0.0-20230625164221-6fe037e2b05f
	github.com/google/go-cmp v0.7.0
	github.com/urfave/cli/v2 v2.27.7
	golang.org/x/sys v0.50.0
)

require (
	github.com/cpuguy83/go-md2man/v2 v2.0.7 // indirect
	github.com/russross/blackfriday/v2 v2.1.0 // indirect
	github.com/xrash/smetrics v0.0.0-20240521201337-686a1a2994c1 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)
