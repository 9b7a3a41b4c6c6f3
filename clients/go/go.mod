module nsbox.dev/client

go 1.19
