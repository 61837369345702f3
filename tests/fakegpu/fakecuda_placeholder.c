int fakegpu_placeholder_;
