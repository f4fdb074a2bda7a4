/* metrics/tfrecord.c: the TFRecord framing of event files (see tfrecord.h), checksummed with
 * core/crc32c. Nothing here knows what the data is. */
#include <errno.h>
#include <string.h>

#include "core/crc32c.h"
#include "core/error.h"
#include "metrics/tfrecord.h"

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
