/* Stand-in for the one Apple SDK header the C code of `ring` includes, so its build script
 * can compile for aarch64-apple-darwin with plain clang when the project is linted for macOS
 * on Linux (.ci/cross-lint). Nothing built with it is linked or run: a real macOS build uses
 * the real SDK. It says what the SDK says for macOS. */
#ifndef KCAP_WATCH_TARGET_CONDITIONALS_STUB
#define KCAP_WATCH_TARGET_CONDITIONALS_STUB
#define TARGET_OS_MAC 1
#define TARGET_OS_OSX 1
#define TARGET_OS_IPHONE 0
#define TARGET_OS_IOS 0
#define TARGET_OS_TV 0
#define TARGET_OS_WATCH 0
#define TARGET_OS_SIMULATOR 0
#endif
