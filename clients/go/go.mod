module github.com/idgen/idgen/clients/go

go 1.19
