/* core/crc32c.c: CRC-32C by slicing by 8 (see crc32c.h). The eight 256-entry tables are built once
 * (pthread_once); table[k][b] is the CRC of byte b followed by k zero bytes, so eight input bytes
 * are folded with eight lookups. Bytes are read one at a time, so the result does not depend on
 * alignment or byte order. */
#include <pthread.h>

#include "core/crc32c.h"

#define POLY 0x82F63B78u

static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void build_tables(void)
{
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (POLY & (0u - (c & 1u)));
        table[0][b] = c;
    }
    for (uint32_t b = 0; b < 256; b++)
        for (int k = 1; k < 8; k++) table[k][b] = (table[k - 1][b] >> 8) ^ table[0][table[k - 1][b] & 0xFF];
}

uint32_t bt_crc32c(uint32_t crc, const void *data, size_t size)
{
    const unsigned char *p = data;
    pthread_once(&table_once, build_tables);
    crc = ~crc;
    while (size >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        crc = table[7][lo & 0xFF] ^ table[6][(lo >> 8) & 0xFF] ^ table[5][(lo >> 16) & 0xFF] ^ table[4][lo >> 24] ^
              table[3][p[4]] ^ table[2][p[5]] ^ table[1][p[6]] ^ table[0][p[7]];
        p += 8;
        size -= 8;
    }
    while (size--) crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xFF];
    return ~crc;
}
