package main

import "syscall"

var sigterm = syscall.SIGTERM
