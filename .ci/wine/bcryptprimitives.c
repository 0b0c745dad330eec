/*
 * A stand-in for Windows' bcryptprimitives.dll, for running the Windows test binaries under
 * Debian's Wine 8.0 only (.ci/windows-test builds it with MinGW-w64 and puts it in the Wine
 * prefix's system32; nothing shipped uses it).
 *
 * Why: Rust's standard library draws its random numbers (HashMap seeds, among others) from
 * ProcessPrng, which it imports from bcryptprimitives.dll. Wine 8.0 has no such DLL, so no
 * Rust-built program starts under it ("module not found" before main). ProcessPrng is
 * documented to always succeed and fill the buffer; RtlGenRandom (exported by advapi32 as
 * SystemFunction036, which Wine has) gives the same kind of bytes, from the same system
 * generator, so forwarding to it is enough for tests.
 */
#include <windows.h>

/* RtlGenRandom's real name; declared here rather than through ntsecapi.h's macro. */
BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T length)
{
    /* RtlGenRandom takes a 32-bit length; ProcessPrng a pointer-sized one. */
    while (length > 0) {
        ULONG chunk = length > 0x40000000 ? 0x40000000 : (ULONG)length;
        if (!SystemFunction036(data, chunk)) {
            /* ProcessPrng may not fail (callers do not check): failing loudly beats
             * handing out bytes that are not random. */
            RaiseFailFastException(NULL, NULL, 0);
        }
        data += chunk;
        length -= chunk;
    }
    return TRUE;
}
