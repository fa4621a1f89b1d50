-- placeholder: replaced by the failure handlers' migration when that branch lands
SELECT 1;
