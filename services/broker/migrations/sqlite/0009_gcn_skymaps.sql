-- Gravitational-wave sky maps as localisations (issue 26): a multi-order
-- HEALPix map ingested with `ithaca ingest gcn` is stored as its 90%
-- credible region, an IVOA ASCII MOC, with the region's area in square
-- degrees and its credible level (0.9). Its row's ra/dec are the densest
-- pixel's centre and error_radius_deg the radius of a circle of the same
-- area, so sky maps order among error circles. All three are NULL for
-- the circles of notices and circulars.
ALTER TABLE gcn_localisations ADD COLUMN moc TEXT;
ALTER TABLE gcn_localisations ADD COLUMN area_deg2 REAL;
ALTER TABLE gcn_localisations ADD COLUMN credible_level REAL;
