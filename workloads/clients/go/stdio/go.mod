module fencecheck/stdio

go 1.22
