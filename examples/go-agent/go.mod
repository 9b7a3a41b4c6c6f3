module nsbox.dev/examples/go-agent

go 1.19

require nsbox.dev/client v0.0.0

replace nsbox.dev/client => ../../clients/go
