/* mneme-cc's compatibility prelude: the host-side min/max overloads nvcc declares implicitly
 * (CUDA's crt/math_functions.h, for mixed int/unsigned/long/long long/float/double operands) and
 * clang's CUDA headers declare for device code only. mneme-cc force-includes it only when clang
 * rejected a translation unit nvcc compiled (docs/instrumentation.md, "Compatibility retry"). */
#pragma once
#if defined(__CUDA__) && defined(__clang__) && !defined(MNEME_NVCC_COMPAT_H)
#define MNEME_NVCC_COMPAT_H

#define MNEME_COMPAT_PAIR(R, A, B)                                                        \
  static inline __attribute__((host)) R min(const A a, const B b) { return (R)a < (R)b ? (R)a : (R)b; } \
  static inline __attribute__((host)) R max(const A a, const B b) { return (R)a > (R)b ? (R)a : (R)b; }

MNEME_COMPAT_PAIR(int, int, int)
MNEME_COMPAT_PAIR(unsigned int, unsigned int, unsigned int)
MNEME_COMPAT_PAIR(unsigned int, int, unsigned int)
MNEME_COMPAT_PAIR(unsigned int, unsigned int, int)
MNEME_COMPAT_PAIR(long int, long int, long int)
MNEME_COMPAT_PAIR(unsigned long int, unsigned long int, unsigned long int)
MNEME_COMPAT_PAIR(unsigned long int, long int, unsigned long int)
MNEME_COMPAT_PAIR(unsigned long int, unsigned long int, long int)
MNEME_COMPAT_PAIR(long long int, long long int, long long int)
MNEME_COMPAT_PAIR(unsigned long long int, unsigned long long int, unsigned long long int)
MNEME_COMPAT_PAIR(unsigned long long int, long long int, unsigned long long int)
MNEME_COMPAT_PAIR(unsigned long long int, unsigned long long int, long long int)
MNEME_COMPAT_PAIR(float, float, float)
MNEME_COMPAT_PAIR(double, double, double)
MNEME_COMPAT_PAIR(double, float, double)
MNEME_COMPAT_PAIR(double, double, float)

#undef MNEME_COMPAT_PAIR
#endif
