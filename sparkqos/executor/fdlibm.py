"""fdlibm's ``exp``, ``log`` and ``pow`` on numpy float64 arrays, bit for bit.

Spark evaluates ``exp``, ``ln``/``log`` and ``pow`` with the JVM's ``java.lang.StrictMath``, which
is specified to return exactly what Sun's fdlibm 5.3 returns (e_exp.c, e_log.c, e_pow.c; the JDK
runs them as the Java port in ``java.lang.FdLibm``, or as the C code, with identical results). The
C library's functions (what numpy calls) are more accurate and so differ in the last bit for some
inputs: ``exp(1)`` is 2.718281828459045 there and 2.7182818284590455 in fdlibm.

Each function here follows fdlibm's algorithm step by step: the same IEEE double operations in the
same order (numpy's elementwise ``+ - * /`` on float64 are correctly rounded and never fused, as the
JVM's), the same bit manipulations of the high and low 32-bit words, and every special-case branch
(NaN, ±inf, ±0, subnormals, overflow and underflow thresholds). Branches become masks: an element
takes the first branch fdlibm would take for it, and the general path is computed on the elements
no special case answered. The algorithms and constants are fdlibm's (public, Sun Microsystems
1993/2004); the code is written for numpy.

>>> exp(np.array([1.0, 0.0, -np.inf])).tolist()
[2.7182818284590455, 1.0, 0.0]
>>> log(np.array([1.0, 0.0, -1.0]))[:2].tolist()
[0.0, -inf]
>>> pow_(np.array([-2.0, 2.0]), np.array([3.0, 0.5])).tolist()
[-8.0, 1.4142135623730951]
"""

from __future__ import annotations

import numpy as np

__all__ = ["exp", "log", "pow_"]

_INF = np.inf
_LOW_MASK = np.uint64(0xFFFF_FFFF)
_HIGH_MASK = np.uint64(0xFFFF_FFFF_0000_0000)


# -- the word access fdlibm's __HI/__LO macros give ----------------------------------------------


def _hi(x: np.ndarray) -> np.ndarray:
    """The high 32-bit word of each double as a signed int (fdlibm's ``__HI``), held in int64."""
    return (x.view(np.int64) >> 32).astype(np.int64)


def _lo(x: np.ndarray) -> np.ndarray:
    """The low 32-bit word of each double, unsigned (fdlibm's ``__LO``), held in int64."""
    return (x.view(np.uint64) & _LOW_MASK).astype(np.int64)


def _from_hi(high: np.ndarray) -> np.ndarray:
    """The double whose high word is ``high`` (taken mod 2**32) and whose low word is 0."""
    return ((np.asarray(high, np.int64) & 0xFFFF_FFFF).astype(np.uint64) << np.uint64(32)).view(np.float64)


def _with_hi(x: np.ndarray, high: np.ndarray) -> np.ndarray:
    """``x`` with its high word replaced by ``high`` (fdlibm's ``SET_HIGH_WORD``)."""
    low = x.view(np.uint64) & _LOW_MASK
    return (((np.asarray(high, np.int64) & 0xFFFF_FFFF).astype(np.uint64) << np.uint64(32)) | low).view(np.float64)


def _lo_zero(x: np.ndarray) -> np.ndarray:
    """``x`` with its low word cleared (fdlibm's ``SET_LOW_WORD(x, 0)``)."""
    return (x.view(np.uint64) & _HIGH_MASK).view(np.float64)


def _as_float64(x: np.ndarray | float) -> np.ndarray:
    return np.array(x, dtype=np.float64, ndmin=1, copy=True)


class _Answers:
    """The result array filled branch by branch: each element keeps the first answer given to it,
    as fdlibm returns from the first branch whose test holds."""

    def __init__(self, n: int):
        self.out = np.full(n, np.nan)
        self.done = np.zeros(n, dtype=bool)

    def give(self, mask: np.ndarray, value: np.ndarray | float) -> None:
        m = mask & ~self.done
        if m.any():
            self.out[m] = value[m] if isinstance(value, np.ndarray) else value
            self.done |= m

    def open(self) -> np.ndarray:
        """Indices of the elements no branch has answered yet."""
        return np.flatnonzero(~self.done)

    def fill(self, idx: np.ndarray, value: np.ndarray) -> None:
        self.out[idx] = value
        self.done[idx] = True


# -- exp (e_exp.c, __ieee754_exp) -------------------------------------------------------------------

_EXP_O_THRESHOLD = float.fromhex("0x1.62e42fefa39efp9")  # 7.09782712893383973096e+02
_EXP_U_THRESHOLD = -float.fromhex("0x1.74910d52d3051p9")  # -7.45133219101941108420e+02
_LN2_HI = float.fromhex("0x1.62e42feep-1")  # 6.93147180369123816490e-01
_LN2_LO = float.fromhex("0x1.a39ef35793c76p-33")  # 1.90821492927058770002e-10
_INV_LN2 = float.fromhex("0x1.71547652b82fep0")  # 1.44269504088896338700e+00
_TWO_M1000 = float.fromhex("0x1.0p-1000")
# The rational approximation's polynomial R(r*r) - 2 (e_exp.c's P1..P5, also used by e_pow.c).
_P1 = float.fromhex("0x1.555555555553ep-3")  # 1.66666666666666019037e-01
_P2 = -float.fromhex("0x1.6c16c16bebd93p-9")  # -2.77777777770155933842e-03
_P3 = float.fromhex("0x1.1566aaf25de2cp-14")  # 6.61375632143793436117e-05
_P4 = -float.fromhex("0x1.bbd41c5d26bf1p-20")  # -1.65339022054652515390e-06
_P5 = float.fromhex("0x1.6376972bea4d0p-25")  # 4.13813679705723846039e-08


def exp(x: np.ndarray | float) -> np.ndarray:
    """``StrictMath.exp`` (fdlibm's ``__ieee754_exp``) of each element of ``x``."""
    x = _as_float64(x)
    ans = _Answers(len(x))
    with np.errstate(all="ignore"):
        hx = _hi(x)
        negative = hx < 0  # xsb, the sign bit
        hx = hx & 0x7FFF_FFFF  # high word of |x|
        # Step 0: non-finite and out-of-range arguments (|x| >= 709.78...).
        big = hx >= 0x4086_2E42
        ans.give(big & (hx >= 0x7FF0_0000) & (((hx & 0xFFFFF) | _lo(x)) != 0), x + x)  # NaN
        ans.give(big & (hx >= 0x7FF0_0000), np.where(negative, 0.0, x))  # exp(+-inf) = inf, 0
        ans.give(big & (x > _EXP_O_THRESHOLD), _INF)  # overflow: huge*huge
        ans.give(big & (x < _EXP_U_THRESHOLD), 0.0)  # underflow: twom1000*twom1000
        # |x| < 2**-28: 1 + x (huge + x > 1 always holds there).
        ans.give(hx < 0x3E30_0000, 1.0 + x)

        idx = ans.open()
        xs, hs, neg = x[idx], hx[idx], negative[idx]
        # Step 1: argument reduction x = k*ln2 + r, r = hi - lo, |r| <= 0.5*ln2.
        k = np.zeros(len(xs), dtype=np.int64)
        hi = np.zeros(len(xs))
        lo = np.zeros(len(xs))
        near = (hs > 0x3FD6_2E42) & (hs < 0x3FF0_A2B2)  # 0.5*ln2 < |x| < 1.5*ln2: k = +-1
        far = hs >= 0x3FF0_A2B2
        hi[near] = np.where(neg[near], xs[near] + _LN2_HI, xs[near] - _LN2_HI)
        lo[near] = np.where(neg[near], -_LN2_LO, _LN2_LO)
        k[near] = np.where(neg[near], -1, 1)
        # k = (int)(invln2*x +- 0.5): Java's and C's conversion truncates toward zero
        kf = np.trunc(_INV_LN2 * xs[far] + np.where(neg[far], -0.5, 0.5))
        k[far] = kf.astype(np.int64)
        hi[far] = xs[far] - kf * _LN2_HI  # t*ln2HI is exact here
        lo[far] = kf * _LN2_LO
        r = np.where(near | far, hi - lo, xs)
        # Step 2: exp(r) = 1 + r + r*c/(2 - c), c = r - (P1*r^2 + ... + P5*r^10).
        t = r * r
        c = r - t * (_P1 + t * (_P2 + t * (_P3 + t * (_P4 + t * _P5))))
        reduced = k != 0
        y = np.where(reduced, 1.0 - ((lo - (r * c) / (2.0 - c)) - hi), 1.0 - ((r * c) / (c - 2.0) - r))
        # Step 3: scale by 2**k by adding k to y's exponent field; below 2**-1021 in two steps so
        # that the one rounding to a subnormal happens in the multiplication by 2**-1000.
        normal = reduced & (k >= -1021)
        tiny = reduced & (k < -1021)
        y[normal] = _with_hi(y[normal], _hi(y[normal]) + (k[normal] << 20))
        y[tiny] = _with_hi(y[tiny], _hi(y[tiny]) + ((k[tiny] + 1000) << 20)) * _TWO_M1000
        ans.fill(idx, y)
    return ans.out


# -- log (e_log.c, __ieee754_log) -------------------------------------------------------------------

_TWO54 = float.fromhex("0x1.0p54")
_LG1, _LG2, _LG3, _LG4, _LG5, _LG6, _LG7 = (
    float.fromhex(h)
    for h in (
        "0x1.5555555555593p-1",  # 6.666666666666735130e-01
        "0x1.999999997fa04p-2",  # 3.999999999940941908e-01
        "0x1.2492494229359p-2",  # 2.857142874366239149e-01
        "0x1.c71c51d8e78afp-3",  # 2.222219843214978396e-01
        "0x1.7466496cb03dep-3",  # 1.818357216161805012e-01
        "0x1.39a09d078c69fp-3",  # 1.531383769920937332e-01
        "0x1.2f112df3e5244p-3",  # 1.479819860511658591e-01
    )
)
_ONE_THIRD = 0.33333333333333333  # e_log.c's literal: the double nearest 1/3


def log(x: np.ndarray | float) -> np.ndarray:
    """``StrictMath.log`` (fdlibm's ``__ieee754_log``) of each element of ``x``."""
    x = _as_float64(x)
    ans = _Answers(len(x))
    with np.errstate(all="ignore"):
        hx, lx = _hi(x), _lo(x)
        # Step 0: zeros, negative numbers, subnormals (scaled up by 2**54), inf and NaN.
        small = hx < 0x0010_0000
        ans.give(small & (((hx & 0x7FFF_FFFF) | lx) == 0), -_INF)  # log(+-0) = -inf
        ans.give(small & (hx < 0), np.nan)  # log(negative) = NaN
        k = np.where(small, -54, 0)
        x = np.where(small, x * _TWO54, x)
        hx = np.where(small, _hi(x), hx)
        ans.give(hx >= 0x7FF0_0000, x + x)  # +inf and NaN

        idx = ans.open()
        x, hx, k = x[idx], hx[idx], k[idx]
        # Step 1: x = 2**k * (1+f) with sqrt(2)/2 < 1+f < sqrt(2).
        k = k + (hx >> 20) - 1023
        hx = hx & 0x000F_FFFF
        i = (hx + 0x9_5F64) & 0x10_0000
        x = _with_hi(x, hx | (i ^ 0x3FF0_0000))  # normalise x or x/2
        k = k + (i >> 20)
        f = x - 1.0
        dk = k.astype(np.float64)
        out = np.empty(len(x))
        # Step 2a: |f| < 2**-20: log(1+f) = f - f*f*(1/2 - f/3).
        tiny = (0x000F_FFFF & (2 + hx)) < 3
        exact = tiny & (f == 0.0)
        out[exact] = np.where(k[exact] == 0, 0.0, dk[exact] * _LN2_HI + dk[exact] * _LN2_LO)
        near = tiny & ~exact
        fn, dn = f[near], dk[near]
        r = fn * fn * (0.5 - _ONE_THIRD * fn)
        out[near] = np.where(k[near] == 0, fn - r, dn * _LN2_HI - ((r - dn * _LN2_LO) - fn))
        # Step 2b: s = f/(2+f), log(1+f) = f - s*(f - R(s)) or f - (hfsq - s*(hfsq + R(s))).
        rest = ~tiny
        f, dk, k, hx = f[rest], dk[rest], k[rest], hx[rest]
        s = f / (2.0 + f)
        z = s * s
        i = hx - 0x6_147A
        w = z * z
        j = 0x6B851 - hx
        t1 = w * (_LG2 + w * (_LG4 + w * _LG6))
        t2 = z * (_LG1 + w * (_LG3 + w * (_LG5 + w * _LG7)))
        i = i | j
        r = t2 + t1
        hfsq = 0.5 * f * f
        zero_k = k == 0
        # Step 3: log(x) = k*ln2_hi + (f - (hfsq - (s*(hfsq + R) + k*ln2_lo))).
        with_hfsq = np.where(zero_k, f - (hfsq - s * (hfsq + r)), dk * _LN2_HI - ((hfsq - (s * (hfsq + r) + dk * _LN2_LO)) - f))
        without = np.where(zero_k, f - s * (f - r), dk * _LN2_HI - ((s * (f - r) - dk * _LN2_LO) - f))
        out[rest] = np.where(i > 0, with_hfsq, without)
        ans.fill(idx, out)
    return ans.out


# -- pow (e_pow.c, __ieee754_pow) -------------------------------------------------------------------

_TWO53 = float.fromhex("0x1.0p53")
_INV_LN2_H = float.fromhex("0x1.715476p0")  # 24 bits of 1/ln2
_INV_LN2_L = float.fromhex("0x1.4ae0bf85ddf44p-26")  # its tail
_CP = float.fromhex("0x1.ec709dc3a03fdp-1")  # 2/(3*ln2)
_CP_H = float.fromhex("0x1.ec709ep-1")  # (float)CP
_CP_L = -float.fromhex("0x1.e2fe0145b01f5p-28")  # tail of CP_H
_DP_H1 = float.fromhex("0x1.2b8034p-1")  # log2(1.5), high part
_DP_L1 = float.fromhex("0x1.cfdeb43cfd006p-27")  # log2(1.5), low part
# Polynomial for (3/2)*(log(x) - 2s - 2/3*s**3), s = (x-1)/(x+1).
_L1, _L2, _L3, _L4, _L5, _L6 = (
    float.fromhex(h)
    for h in (
        "0x1.3333333333303p-1",  # 5.99999999999994648725e-01
        "0x1.b6db6db6fabffp-2",  # 4.28571428578550184252e-01
        "0x1.55555518f264dp-2",  # 3.33333329818377432918e-01
        "0x1.17460a91d4101p-2",  # 2.72728123808534006489e-01
        "0x1.d864a93c9db65p-3",  # 2.30660745775561754067e-01
        "0x1.a7e284a454eefp-3",  # 2.06975017800338417784e-01
    )
)
_POW_LN2 = float.fromhex("0x1.62e42fefa39efp-1")  # ln2
_POW_LN2_H = float.fromhex("0x1.62e43p-1")  # ln2, high part
_POW_LN2_L = -float.fromhex("0x1.05c610ca86c39p-29")  # ln2, low part
_OVT = 8.0085662595372944372e-17  # -(1024 - log2(ovfl + 0.5ulp))
_MAX = np.finfo(np.float64).max
_SIGNED_C090CC00 = 0xC090_CC00 - (1 << 32)  # the high word of -1075.0 as a signed int


def _y_is_int(y_abs: np.ndarray) -> np.ndarray:
    """e_pow.c's ``yisint`` for |y|: 0 not an integer, 1 an odd integer, 2 an even integer."""
    out = np.zeros(len(y_abs), dtype=np.int64)
    out[y_abs >= _TWO53] = 2  # every double from 2**53 on is an even integer
    mid = (y_abs >= 1.0) & (y_abs < _TWO53)
    whole = np.trunc(y_abs[mid])
    odd = np.where(whole == y_abs[mid], 2 - (whole.astype(np.int64) & 1), 0)
    out[mid] = odd
    return out


def pow_(x: np.ndarray | float, y: np.ndarray | float) -> np.ndarray:
    """``StrictMath.pow`` (fdlibm's ``__ieee754_pow``) of each pair of ``x`` and ``y`` (broadcast)."""
    x, y = (np.ascontiguousarray(a, dtype=np.float64) for a in np.broadcast_arrays(_as_float64(x), _as_float64(y)))
    ans = _Answers(len(x))
    with np.errstate(all="ignore"):
        x_abs, y_abs = np.abs(x), np.abs(y)
        # Special values of y, and NaN (fdlibm's cases 1-9).
        ans.give(y == 0.0, 1.0)  # x**0 = 1, even for NaN
        ans.give(np.isnan(x) | np.isnan(y), x + y)
        ans.give(y == 2.0, x * x)
        ans.give((y == 0.5) & (x >= -_MAX), np.sqrt(x + 0.0))  # + 0.0 turns -0.0 into 0.0
        ans.give(y == 1.0, x)
        ans.give(y == -1.0, 1.0 / x)
        y_inf = y_abs == _INF
        ans.give(y_inf & (x_abs == 1.0), y - y)  # (+-1)**(+-inf) is NaN
        ans.give(y_inf & (x_abs > 1.0), np.where(y >= 0, y, 0.0))  # (|x| > 1)**(+-inf) = inf, 0
        ans.give(y_inf, np.where(y < 0, -y, 0.0))  # (|x| < 1)**(-+inf) = inf, 0

        hx = _hi(x)
        ix = hx & 0x7FFF_FFFF
        y_is_int = np.where(hx < 0, _y_is_int(y_abs), 0)
        # Special values of x: +-0, +-inf, +-1 (cases 10-17).
        z = np.where(y < 0.0, 1.0 / x_abs, x_abs)
        z = np.where((hx < 0) & (((ix - 0x3FF0_0000) | y_is_int) == 0), np.nan, z)  # (-1)**non-int
        z = np.where((hx < 0) & (y_is_int == 1), -1.0 * z, z)  # (x < 0)**odd = -(|x|**odd)
        ans.give((x_abs == 0.0) | (x_abs == _INF) | (x_abs == 1.0), z)
        # (x < 0)**(non-integer) is NaN (case 19).
        ans.give((hx < 0) & (y_is_int == 0), np.nan)
        s = np.where((hx < 0) & (y_is_int == 1), -1.0, 1.0)  # sign of the result: (-ve)**odd

        # |y| huge (> ~2**31): over- or underflow unless x is very close to 1.
        huge_y = y_abs > float.fromhex("0x1.00000ffffffffp31")
        ans.give(huge_y & (x_abs < float.fromhex("0x1.fffff00000000p-1")), np.where(y < 0.0, s * _INF, s * 0.0))
        ans.give(huge_y & (x_abs > float.fromhex("0x1.00000ffffffffp0")), np.where(y > 0.0, s * _INF, s * 0.0))

        idx = ans.open()
        xa, yv, sv, ixv, hy = x_abs[idx], y[idx], s[idx], ix[idx], huge_y[idx]
        t1 = np.empty(len(idx))
        t2 = np.empty(len(idx))

        # Step 1 for huge |y|: |1-x| <= 2**-20, log2(x) = (t - t^2/2 + t^3/3 - t^4/4)/ln2, t = x-1.
        t = xa[hy] - 1.0
        w = (t * t) * (0.5 - t * (0.3333333333333333333333 - t * 0.25))
        u = _INV_LN2_H * t
        v = t * _INV_LN2_L - w * _INV_LN2
        th = _lo_zero(u + v)
        t1[hy] = th
        t2[hy] = v - (th - u)

        # Step 1 otherwise: log2(|x|) = n + log2(1+f) in two pieces t1 + t2.
        g = ~hy
        xg, ig = xa[g], ixv[g]
        n = np.zeros(len(xg), dtype=np.int64)
        sub = ig < 0x0010_0000  # subnormal: scale up by 2**53
        xg = np.where(sub, xg * _TWO53, xg)
        n = np.where(sub, n - 53, n)
        ig = np.where(sub, _hi(xg), ig)
        n = n + (ig >> 20) - 0x3FF
        j = ig & 0x000F_FFFF
        ig = j | 0x3FF0_0000  # normalise
        # the interval: |x| < sqrt(3/2) (k = 0), < sqrt(3) (k = 1), else halve and k = 0
        kk = np.where(j <= 0x3988E, 0, np.where(j < 0xBB67A, 1, 0))
        up = j >= 0xBB67A
        n = np.where(up, n + 1, n)
        ig = np.where(up, ig - 0x0010_0000, ig)
        xg = _with_hi(xg, ig)
        # ss = s_h + s_l = (x - bp)/(x + bp), bp = 1 or 1.5
        bp = 1.0 + 0.5 * kk
        u = xg - bp
        v = 1.0 / (xg + bp)
        ss = u * v
        s_h = _lo_zero(ss)
        t_h = _from_hi(((ig >> 1) | 0x2000_0000) + 0x0008_0000 + (kk << 18))  # x + bp, high part
        t_l = xg - (t_h - bp)
        s_l = v * ((u - s_h * t_h) - s_h * t_l)
        # log(x): 2s + s**3 * (polynomial), with s = ss carried in two pieces
        s2 = ss * ss
        r = s2 * s2 * (_L1 + s2 * (_L2 + s2 * (_L3 + s2 * (_L4 + s2 * (_L5 + s2 * _L6)))))
        r = r + s_l * (s_h + ss)
        s2 = s_h * s_h
        t_h = _lo_zero(3.0 + s2 + r)
        t_l = r - ((t_h - 3.0) - s2)
        u = s_h * t_h  # u + v = ss*(1 + ...)
        v = s_l * t_h + t_l * ss
        p_h = _lo_zero(u + v)  # 2/(3*ln2) * (ss + ...)
        p_l = v - (p_h - u)
        z_h = _CP_H * p_h
        z_l = _CP_L * p_h + p_l * _CP + _DP_L1 * kk
        # log2(x) = n + dp_h + z_h + z_l
        tn = n.astype(np.float64)
        th = _lo_zero(((z_h + z_l) + _DP_H1 * kk) + tn)
        t1[g] = th
        t2[g] = z_l - (((th - tn) - _DP_H1 * kk) - z_h)

        # Step 2: y*log2(x) = p_h + p_l with y split as y1 + (y - y1).
        y1 = _lo_zero(yv)
        p_l = (yv - y1) * t1 + yv * t2
        p_h = y1 * t1
        z = p_l + p_h
        j = _hi(z)
        lo_z = _lo(z)
        out = _Answers(len(idx))
        # Overflow (z >= 1024) and underflow (z <= -1075).
        over = j >= 0x4090_0000
        out.give(over & (((j - 0x4090_0000) | lo_z) != 0), sv * _INF)
        out.give(over & (p_l + _OVT > z - p_h), sv * _INF)  # z == 1024 and the rest rounds it above
        under = ~over & ((j & 0x7FFF_FFFF) >= 0x4090_CC00)
        out.give(under & (((j - _SIGNED_C090CC00) | lo_z) != 0), sv * 0.0)
        out.give(under & (p_l <= z - p_h), sv * 0.0)

        # Step 3: 2**(p_h + p_l) = 2**n * exp((p_h + p_l - n)*ln2), n the nearest integer.
        i = j & 0x7FFF_FFFF
        k = (i >> 20) - 0x3FF
        big = i > 0x3FE0_0000  # |z| > 0.5: n = [z + 0.5], else n = 0
        m = j + (0x0010_0000 >> np.clip(k + 1, 0, 31))
        k2 = ((m & 0x7FFF_FFFF) >> 20) - 0x3FF
        k2c = np.clip(k2, 0, 20)
        tt = _from_hi(m & ~(0x000F_FFFF >> k2c))
        m = ((m & 0x000F_FFFF) | 0x0010_0000) >> (20 - k2c)
        m = np.where(j < 0, -m, m)
        nn = np.where(big, m, 0)
        p_h = np.where(big, p_h - tt, p_h)
        t = _lo_zero(p_l + p_h)
        u = t * _POW_LN2_H
        v = (p_l - (t - p_h)) * _POW_LN2 + t * _POW_LN2_L
        z = u + v
        w = v - (z - u)
        t = z * z
        t1 = z - t * (_P1 + t * (_P2 + t * (_P3 + t * (_P4 + t * _P5))))
        r = (z * t1) / (t1 - 2.0) - (w + z * w)
        z = 1.0 - (r - z)
        jz = _hi(z) + (nn << 20)
        # add n to z's exponent; a subnormal result is z*2**n rounded once (fdlibm's scalbn)
        subnormal = (jz >> 20) <= 0
        scaled = _with_hi(z, _hi(z) + ((nn + 200) << 20)) * float.fromhex("0x1.0p-200")
        z = np.where(subnormal, scaled, _with_hi(z, jz))
        out.give(np.ones(len(idx), dtype=bool), sv * z)
        ans.fill(idx, out.out)
    return ans.out
