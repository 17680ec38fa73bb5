-- What a decision card's first paragraph said when the card was opened,
-- cut to 160 characters (issue #14): people recognise where a card stood
-- once that paragraph is gone. Null for cards opened before this column.
ALTER TABLE decision_cards ADD COLUMN excerpt TEXT;
