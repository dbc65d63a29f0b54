#!/usr/bin/env python3
"""An independent light curve of one ZTF object, read with fastavro.

Reads every Avro container under the folders given, takes every alert of
OBJECT_ID, and prints its light curve as JSON on stdout with the rules the
broker documents (get_broker_alert_photometry):

* detections: the alert's candidate and every prv_candidates entry with a
  magpsf; upper limits: prv_candidates entries without magpsf (diffmaglim);
  forced photometry: fp_hists rows with a flux, a positive error and a zero
  point, flux above -99999; SNR >= 3 is a magnitude, else a 5-sigma limit;
* each measurement once (kind, fid, jd, candid), sorted by jd, fid, kind,
  candid.

The Rust test compares this with what the broker serves through the MCP
edge. Usage: lightcurve_check.py OBJECT_ID DIR [DIR ...]
"""
import json
import math
import os
import sys

import fastavro

KIND_ORDER = {"detection": 0, "upper_limit": 1, "forced": 2}


def alerts(dirs):
    for d in dirs:
        for root, _, files in os.walk(d):
            for name in sorted(files):
                if name.endswith(".avro"):
                    with open(os.path.join(root, name), "rb") as f:
                        yield from fastavro.reader(f)


def main():
    object_id, dirs = sys.argv[1], sys.argv[2:]
    points = {}
    n_alerts = 0

    def add(p):
        key = (p["kind"], p["fid"], p["jd"], p.get("candid") or 0)
        points.setdefault(key, p)

    for a in alerts(dirs):
        if a["objectId"] != object_id:
            continue
        n_alerts += 1
        c = a["candidate"]
        add({"jd": c["jd"], "fid": c["fid"], "kind": "detection", "is_limit": False,
             "mag": c["magpsf"], "mag_err": c["sigmapsf"], "candid": c["candid"]})
        for p in a.get("prv_candidates") or []:
            if p.get("magpsf") is not None:
                add({"jd": p["jd"], "fid": p["fid"], "kind": "detection", "is_limit": False,
                     "mag": p["magpsf"], "mag_err": p.get("sigmapsf"), "candid": p.get("candid")})
            elif p.get("diffmaglim") is not None:
                add({"jd": p["jd"], "fid": p["fid"], "kind": "upper_limit", "is_limit": True,
                     "mag": p["diffmaglim"], "mag_err": None, "candid": None})
        for h in a.get("fp_hists") or []:
            flux, err, zp = h.get("forcediffimflux"), h.get("forcediffimfluxunc"), h.get("magzpsci")
            if flux is None or err is None or zp is None or flux <= -99999 or err <= 0:
                continue
            snr = flux / err
            if snr >= 3:
                mag, mag_err, limit = zp - 2.5 * math.log10(flux), 1.085736 / snr, False
            else:
                mag, mag_err, limit = zp - 2.5 * math.log10(5 * err), None, True
            add({"jd": h["jd"], "fid": h["fid"], "kind": "forced", "is_limit": limit,
                 "mag": mag, "mag_err": mag_err, "candid": None})
    ordered = sorted(points.values(),
                     key=lambda p: (p["jd"], p["fid"], KIND_ORDER[p["kind"]], p["candid"] or 0))
    for p in ordered:
        if p["candid"] is not None:
            p["candid"] = str(p["candid"])
    json.dump({"objectId": object_id, "alerts": n_alerts, "reader": "fastavro " + fastavro.__version__,
               "points": ordered}, sys.stdout)


if __name__ == "__main__":
    main()
