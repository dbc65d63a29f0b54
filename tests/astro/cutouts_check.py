#!/usr/bin/env python3
"""An independent reading of one ZTF alert's three cutouts, with astropy.

Reads the Avro container FILE with fastavro, takes the alert CANDID, and
for each of its cutouts (science, template, difference) inflates the
gzipped FITS, opens it with astropy.io.fits and prints, as JSON on stdout:
its width and height, its pixels in FITS order (row-major, the first row
stored first; NaN as null), and astropy's zscale limits
(astropy.visualization.ZScaleInterval with its defaults, IRAF's
parameters) of the pixels that have a value: not NaN, and not the float32
extremes (beyond 3e38 in magnitude) ZTF's templates hold where the
reference has no data, as the broker documents. The Rust test compares them with what the broker decodes and
serves. Usage: cutouts_check.py FILE CANDID
"""
import gzip
import io
import json
import math
import sys
import warnings

import fastavro
import numpy as np
from astropy.io import fits
from astropy.visualization import ZScaleInterval

FILL = 3.0e38
KINDS = {"science": "cutoutScience", "template": "cutoutTemplate", "difference": "cutoutDifference"}


def main():
    path, candid = sys.argv[1], int(sys.argv[2])
    with open(path, "rb") as f:
        alert = next((a for a in fastavro.reader(f) if a["candid"] == candid), None)
    if alert is None:
        sys.exit(f"no alert {candid} in {path}")
    out = {}
    for kind, field in KINDS.items():
        stamp = alert[field]["stampData"]
        if stamp[:2] == b"\x1f\x8b":
            stamp = gzip.decompress(stamp)
        with warnings.catch_warnings():
            # ZTF writes `SIMPLE  =  T` off the fixed column; astropy warns
            # and reads it.
            warnings.simplefilter("ignore")
            with fits.open(io.BytesIO(stamp)) as hdus:
                data = hdus[0].data
                height, width = data.shape
                pixels = [None if math.isnan(v) else float(v) for v in data.ravel().tolist()]
                valued = data[np.isfinite(data) & (np.abs(data) < FILL)]
                z1, z2 = ZScaleInterval().get_limits(valued)
        out[kind] = {
            "width": width,
            "height": height,
            "pixels": pixels,
            "zscale": [float(z1), float(z2)],
        }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
