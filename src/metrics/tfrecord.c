/* metrics/tfrecord.c: CRC-32C (the Castagnoli polynomial, reflected 0x82f63b78) and
 * the TFRecord framing of event files (see tfrecord.h). Nothing here knows what the data is. */
#include <errno.h>
#include <string.h>

#include "core/error.h"
#include "metrics/tfrecord.h"

/* Bit by bit: event records are a few hundred bytes a step, so a table buys nothing and a
 * lazily built one would be shared state between threads. */
uint32_t bt_crc32c(uint32_t crc, const void *data, size_t n)
{
    const unsigned char *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++) crc = crc & 1 ? (crc >> 1) ^ 0x82f63b78u : crc >> 1;
    }
    return ~crc;
}

uint32_t bt_crc32c_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

static void put_le(unsigned char *out, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++) out[i] = (unsigned char)(v >> (8 * i));
}

void bt_tfrecord_frame(const void *data, size_t n, unsigned char header[12], unsigned char footer[4])
{
    put_le(header, (uint64_t)n, 8);
    put_le(header + 8, bt_crc32c_mask(bt_crc32c(0, header, 8)), 4);
    put_le(footer, bt_crc32c_mask(bt_crc32c(0, data, n)), 4);
}

bt_status bt_tfrecord_write(FILE *f, const char *path, const void *data, size_t n)
{
    unsigned char header[12], footer[4];
    bt_tfrecord_frame(data, n, header, footer);
    if (fwrite(header, 1, sizeof header, f) != sizeof header || (n && fwrite(data, 1, n, f) != n) ||
        fwrite(footer, 1, sizeof footer, f) != sizeof footer)
        return bt_error(BT_ERR_IO, "%s: cannot write an event record: %s", path, strerror(errno));
    return BT_OK;
}
