/* tests/fuzz/fuzz_input.h: shared by the libFuzzer harnesses (see docs/testing.md). The readers
 * under test take a path, so fuzz_input_path() puts the input into an in-memory file (memfd) and
 * returns a path that opens it ("/proc/self/fd/N"): no disk traffic, and mmap works as on a real
 * file. One memfd per process, rewritten for every input. */
#ifndef BT_FUZZ_INPUT_H
#define BT_FUZZ_INPUT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static const char *fuzz_input_path(const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("baton-fuzz", 0);
        if (fd < 0) {
            perror("memfd_create");
            abort();
        }
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0 || (size && pwrite(fd, data, size, 0) != (ssize_t)size)) {
        perror("fuzz input");
        abort();
    }
    return path;
}

#endif
