-- Where each live server run's API is reached (Settings.advertise_address, else its listen
-- address with the bound port), so that a replica forwards a session's call to the one that
-- holds the session's sandbox. '' when it has none to give (a run from before, or a listen
-- address other hosts cannot name).
ALTER TABLE servers ADD COLUMN address TEXT NOT NULL DEFAULT '';
