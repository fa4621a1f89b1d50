-- placeholder: replaced when that branch lands
SELECT 1;
