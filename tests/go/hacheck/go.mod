module fsmem.test/hacheck

go 1.19
